//! A small BTF walker that turns a map's raw key/value bytes into JSON the way
//! `bpftool -j map dump` formats them (its "formatted" object).
//!
//! Why BTF and not our own struct mirrors: the pinned maps carry the BTF the
//! scheduler was compiled with, so decoding through it is always right for the
//! running scheduler, even one built from a different intf.h than this tool.
//! libbpf-rs 0.27 cannot load a map's BTF by id, so this goes through
//! libbpf-sys (`btf__load_from_kernel_by_id`) and reads the type records
//! directly; only the kinds our maps use are decoded (ints, arrays, structs,
//! unions, enums, typedefs and modifiers), anything else becomes raw hex.

use std::ffi::CStr;

use anyhow::{bail, Result};
use serde_json::{json, Map, Value};

const KIND_INT: u32 = 1;
const KIND_PTR: u32 = 2;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;

/// Owned libbpf `struct btf`.
pub struct Btf {
    raw: *mut libbpf_sys::btf,
}

impl Drop for Btf {
    fn drop(&mut self) {
        // SAFETY: `raw` came from a libbpf constructor and is freed once.
        unsafe { libbpf_sys::btf__free(self.raw) };
    }
}

/// One BTF type record, copied out of libbpf's buffer.
struct Type {
    name: String,
    kind: u32,
    vlen: u32,
    kind_flag: bool,
    /// `size` for ints/structs/unions/enums, `type` for typedefs/modifiers/pointers.
    size_or_type: u32,
    /// Pointer to the record, for the kind-specific data that follows it.
    ptr: *const libbpf_sys::btf_type,
}

impl Btf {
    /// The BTF object the kernel holds under `id` (a map's `btf_id`).
    pub fn from_kernel_id(id: u32) -> Result<Self> {
        // SAFETY: plain libbpf call; the result is checked below.
        let raw = unsafe { libbpf_sys::btf__load_from_kernel_by_id(id) };
        if raw.is_null() {
            bail!(
                "loading BTF object {id}: {}",
                std::io::Error::last_os_error()
            );
        }
        Ok(Self { raw })
    }

    /// Wrap a `struct btf` built by libbpf (tests build one with btf__add_*).
    #[cfg(test)]
    pub fn from_raw(raw: *mut libbpf_sys::btf) -> Self {
        Self { raw }
    }

    fn name(&self, off: u32) -> String {
        // SAFETY: libbpf returns a NUL-terminated string inside the BTF's
        // string section (or NULL for a bad offset).
        let p = unsafe { libbpf_sys::btf__name_by_offset(self.raw, off) };
        if p.is_null() {
            return String::new();
        }
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    fn ty(&self, id: u32) -> Result<Type> {
        // SAFETY: libbpf bounds-checks `id` and returns NULL when out of range.
        let p = unsafe { libbpf_sys::btf__type_by_id(self.raw, id) };
        if p.is_null() {
            bail!("BTF type {id} does not exist");
        }
        // SAFETY: `p` points to a btf_type record inside the BTF data.
        let t = unsafe { &*p };
        Ok(Type {
            name: self.name(t.name_off),
            kind: (t.info >> 24) & 0x1f,
            vlen: t.info & 0xffff,
            kind_flag: t.info >> 31 == 1,
            // SAFETY: both union members are u32s.
            size_or_type: unsafe { t.__bindgen_anon_1.size },
            ptr: p,
        })
    }

    /// Skip typedefs and modifiers.
    fn resolve(&self, mut id: u32) -> Result<(u32, Type)> {
        for _ in 0..32 {
            let t = self.ty(id)?;
            match t.kind {
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    id = t.size_or_type
                }
                _ => return Ok((id, t)),
            }
        }
        bail!("BTF type chain too long at {id}")
    }

    /// The name of type `id` as C spells it (after typedefs), e.g. "struct tailctl_stats".
    pub fn type_name(&self, id: u32) -> String {
        match self.ty(id) {
            Ok(t) => match t.kind {
                KIND_STRUCT => format!("struct {}", t.name),
                KIND_UNION => format!("union {}", t.name),
                KIND_ENUM | KIND_ENUM64 => format!("enum {}", t.name),
                _ => t.name,
            },
            Err(_) => format!("type {id}"),
        }
    }

    /// Size in bytes of type `id`.
    pub fn size_of(&self, id: u32) -> Result<usize> {
        let (_, t) = self.resolve(id)?;
        Ok(match t.kind {
            KIND_INT | KIND_STRUCT | KIND_UNION | KIND_ENUM | KIND_ENUM64 => {
                t.size_or_type as usize
            }
            KIND_PTR => 8,
            KIND_ARRAY => {
                let a = array_of(&t);
                self.size_of(a.type_)? * a.nelems as usize
            }
            k => bail!("no size for BTF kind {k}"),
        })
    }

    /// Decode `bytes` (at least the type's size) as type `id`, like bpftool's
    /// JSON: ints as numbers, arrays as lists, structs as objects.
    pub fn decode(&self, id: u32, bytes: &[u8]) -> Result<Value> {
        let (_, t) = self.resolve(id)?;
        Ok(match t.kind {
            KIND_INT => {
                // The int's encoding word follows the record.
                // SAFETY: an INT record is followed by one u32.
                let enc = unsafe { *(t.ptr.add(1) as *const u32) };
                let signed = (enc >> 24) & 1 == 1;
                let is_bool = (enc >> 24) & 4 == 4;
                let size = t.size_or_type as usize;
                let v = le(bytes, size)?;
                if is_bool {
                    json!(v != 0)
                } else if signed {
                    let shift = 64 - 8 * size.min(8) as u32;
                    json!(((v << shift) as i64) >> shift)
                } else if size > 8 {
                    // bpftool prints 128-bit ints as hex strings.
                    json!(format!("0x{}", hex_be(&bytes[..size])))
                } else {
                    json!(v)
                }
            }
            KIND_PTR => json!(le(bytes, 8)?),
            KIND_ENUM | KIND_ENUM64 => {
                let size = t.size_or_type as usize;
                let v = le(bytes, size)?;
                json!(self.enum_name(&t, v).unwrap_or_else(|| v.to_string()))
            }
            KIND_ARRAY => {
                let a = array_of(&t);
                let esz = self.size_of(a.type_)?;
                let mut out = Vec::with_capacity(a.nelems as usize);
                for i in 0..a.nelems as usize {
                    out.push(self.decode(a.type_, slice(bytes, i * esz, esz)?)?);
                }
                Value::Array(out)
            }
            KIND_STRUCT | KIND_UNION => {
                let mut obj = Map::new();
                // SAFETY: a STRUCT/UNION record is followed by vlen btf_members.
                let members = unsafe {
                    std::slice::from_raw_parts(
                        t.ptr.add(1) as *const libbpf_sys::btf_member,
                        t.vlen as usize,
                    )
                };
                for m in members {
                    let bit_off = if t.kind_flag {
                        m.offset & 0xffffff
                    } else {
                        m.offset
                    };
                    let name = self.name(m.name_off);
                    let msize = self.size_of(m.type_)?;
                    let v = self.decode(m.type_, slice(bytes, bit_off as usize / 8, msize)?)?;
                    if name.is_empty() {
                        // Anonymous struct/union members are flattened, as in C.
                        if let Value::Object(inner) = v {
                            obj.extend(inner);
                            continue;
                        }
                    }
                    obj.insert(name, v);
                }
                Value::Object(obj)
            }
            _ => json!(format!("0x{}", hex_be(bytes))),
        })
    }

    fn enum_name(&self, t: &Type, v: u64) -> Option<String> {
        // SAFETY: an ENUM record is followed by vlen {name_off, val} pairs
        // (ENUM64 by {name_off, lo32, hi32}).
        unsafe {
            for i in 0..t.vlen as usize {
                let (name_off, val) = if t.kind == KIND_ENUM {
                    let e = (t.ptr.add(1) as *const [u32; 2]).add(i);
                    ((*e)[0], (*e)[1] as u64)
                } else {
                    let e = (t.ptr.add(1) as *const [u32; 3]).add(i);
                    ((*e)[0], (*e)[1] as u64 | ((*e)[2] as u64) << 32)
                };
                if val == v {
                    return Some(self.name(name_off));
                }
            }
        }
        None
    }
}

fn array_of(t: &Type) -> libbpf_sys::btf_array {
    // SAFETY: an ARRAY record is followed by one btf_array.
    unsafe { *(t.ptr.add(1) as *const libbpf_sys::btf_array) }
}

fn slice(bytes: &[u8], off: usize, len: usize) -> Result<&[u8]> {
    match bytes.get(off..off + len) {
        Some(s) => Ok(s),
        None => bail!(
            "value too short: need bytes {off}..{} of {}",
            off + len,
            bytes.len()
        ),
    }
}

/// Little-endian unsigned integer of `size` bytes (at most 8 used).
pub fn le(bytes: &[u8], size: usize) -> Result<u64> {
    let b = slice(bytes, 0, size)?;
    let mut v = 0u64;
    for (i, byte) in b.iter().take(8).enumerate() {
        v |= (*byte as u64) << (8 * i);
    }
    Ok(v)
}

fn hex_be(bytes: &[u8]) -> String {
    bytes.iter().rev().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    /// Build `struct s { u32 a; s32 b; u64 arr[3]; }` with libbpf's writer.
    fn sample() -> (Btf, u32) {
        unsafe {
            let b = libbpf_sys::btf__new_empty();
            assert!(!b.is_null());
            let c = |s: &str| CString::new(s).unwrap();
            let u32t = libbpf_sys::btf__add_int(b, c("unsigned int").as_ptr(), 4, 0);
            let s32t = libbpf_sys::btf__add_int(b, c("int").as_ptr(), 4, 1);
            let u64t = libbpf_sys::btf__add_int(b, c("unsigned long long").as_ptr(), 8, 0);
            let td = libbpf_sys::btf__add_typedef(b, c("u64").as_ptr(), u64t);
            let arr = libbpf_sys::btf__add_array(b, u32t, td, 3);
            let st = libbpf_sys::btf__add_struct(b, c("s").as_ptr(), 32);
            assert!(st > 0);
            assert_eq!(
                libbpf_sys::btf__add_field(b, c("a").as_ptr(), u32t, 0, 0),
                0
            );
            assert_eq!(
                libbpf_sys::btf__add_field(b, c("b").as_ptr(), s32t, 32, 0),
                0
            );
            assert_eq!(
                libbpf_sys::btf__add_field(b, c("arr").as_ptr(), arr, 64, 0),
                0
            );
            (Btf::from_raw(b), st as u32)
        }
    }

    #[test]
    fn decodes_struct_like_bpftool() {
        let (btf, st) = sample();
        let mut bytes = Vec::new();
        bytes.extend(7u32.to_le_bytes());
        bytes.extend((-2i32).to_le_bytes());
        for v in [1u64, u64::MAX, 3] {
            bytes.extend(v.to_le_bytes());
        }
        assert_eq!(btf.size_of(st).unwrap(), 32);
        assert_eq!(btf.type_name(st), "struct s");
        let v = btf.decode(st, &bytes).unwrap();
        assert_eq!(v, json!({"a": 7, "b": -2, "arr": [1, u64::MAX, 3]}));
    }

    #[test]
    fn short_value_is_an_error() {
        let (btf, st) = sample();
        let err = btf.decode(st, &[0u8; 10]).unwrap_err().to_string();
        assert!(err.contains("too short"), "{err}");
    }
}
