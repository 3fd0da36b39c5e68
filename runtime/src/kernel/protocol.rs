//! The registration protocol between a tailctl-rt service and the
//! `scx_tailctl` daemon, over a unix stream socket.
//!
//! One request line, one reply line, then the connection stays open: it is how
//! each side learns that the other is gone (EOF). A service that closes it is
//! unregistered; a service that sees EOF falls back to user-space tail-control.
//!
//! ```text
//! service -> daemon   REGISTER 1 workers=<tid>,<tid>,... thresholds=<ns>,<ns>,... region=<0|1> [priority=<0..7>]\n
//!                     (region=1: the service's existing region map fd rides along in
//!                      SCM_RIGHTS, when it re-registers after a daemon restart)
//! daemon -> service   OK service=<slot>\n    + the region map fd in SCM_RIGHTS
//!                     ERR <reason>\n
//! ```
//!
//! `workers` may be empty: a runtime that needs its region before its worker
//! threads exist (it builds its pool on the mapped region) registers first and
//! binds its threads once they run:
//!
//! ```text
//! service -> daemon   BIND <tid>,<tid>,...\n     (worker-slot order)
//! daemon -> service   OK service=<slot>\n  |  ERR <reason>\n
//! ```
//!
//! `priority` is the service's level in the kernel scheduler (0..=7, higher is
//! more urgent; absent: [`PRIORITY_NORMAL`], the level of every unregistered
//! task). The daemon decides who may ask for a level above normal.
//!
//! `thresholds[q-1]` is the work (ns) after which a request is serialized at
//! `q` active requests; 0 means never. The peer's pid and uid come from
//! SO_PEERCRED, never from the message.

use std::fmt;

/// Protocol version spoken by this build.
pub const VERSION: u32 = 1;
/// Longest line either side accepts.
pub const MAX_LINE: usize = 64 * 1024;
/// Most worker tids in one registration (the region's worker slots).
pub const MAX_WORKERS: usize = crate::shared_state::MAX_WORKERS;
/// Most threshold entries (the kernel's table size).
pub const MAX_THRESHOLDS: usize = 256;
/// Highest priority level a service may ask for (levels are 0..=MAX_PRIORITY).
pub const MAX_PRIORITY: u8 = 7;
/// The level of unregistered tasks and of services that do not ask for one.
pub const PRIORITY_NORMAL: u8 = 3;
/// In the `ERR` of a connection refused because its user opens connections
/// faster than the daemon's `--max-connect-rate`: worth trying again shortly
/// (the runtime does, see `AssistedPool::start`), unlike the other refusals.
pub const TOO_FAST: &str = "opens connections too fast";

/// A service's registration request.
///
/// ```
/// use tailctl_rt::kernel::protocol::Register;
/// let r = Register { workers: vec![10, 11], thresholds_ns: vec![0, 5_000_000], reuse_region: false, priority: Some(5) };
/// assert_eq!(Register::parse(&r.to_line()).unwrap(), r);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Register {
    /// Kernel thread ids of the workers, in worker-slot order.
    pub workers: Vec<u32>,
    /// Serialization thresholds by active-request count.
    pub thresholds_ns: Vec<u64>,
    /// Whether the service attaches its existing region map fd.
    pub reuse_region: bool,
    /// Scheduling level asked for (None: [`PRIORITY_NORMAL`]); omitted from
    /// the line when None, so a daemon without priorities still understands it.
    pub priority: Option<u8>,
}

/// What was wrong with a message.
///
/// ```
/// use tailctl_rt::kernel::protocol::Register;
/// let e = Register::parse("HELLO").unwrap_err();
/// assert!(e.to_string().contains("REGISTER"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtocolError(pub String);

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ProtocolError {}

fn err<T>(msg: impl Into<String>) -> Result<T, ProtocolError> {
    Err(ProtocolError(msg.into()))
}

fn parse_list<T: std::str::FromStr>(
    key: &str,
    v: &str,
    max: usize,
) -> Result<Vec<T>, ProtocolError> {
    if v.is_empty() {
        return Ok(Vec::new());
    }
    let items: Vec<&str> = v.split(',').collect();
    if items.len() > max {
        return err(format!(
            "{key}: {} entries, at most {max} allowed",
            items.len()
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, s)| {
            s.parse::<T>().map_err(|_| {
                ProtocolError(format!("{key}: entry {} ({s:?}) is not a number", i + 1))
            })
        })
        .collect()
}

impl Register {
    /// The request line, with its newline.
    pub fn to_line(&self) -> String {
        let join = |v: &[String]| v.join(",");
        let priority = self
            .priority
            .map_or(String::new(), |p| format!(" priority={p}"));
        format!(
            "REGISTER {VERSION} workers={} thresholds={} region={}{priority}\n",
            join(&self.workers.iter().map(u32::to_string).collect::<Vec<_>>()),
            join(
                &self
                    .thresholds_ns
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
            ),
            u8::from(self.reuse_region)
        )
    }

    /// Parse a request line (with or without its newline).
    pub fn parse(line: &str) -> Result<Self, ProtocolError> {
        let line = line.trim_end_matches(['\n', '\r']);
        let mut words = line.split(' ');
        if words.next() != Some("REGISTER") {
            return err("expected a line starting with REGISTER");
        }
        match words.next().map(str::parse::<u32>) {
            Some(Ok(VERSION)) => {}
            Some(Ok(v)) => {
                return err(format!(
                    "protocol version {v} not supported (this daemon speaks {VERSION})"
                ))
            }
            _ => return err("REGISTER: missing or malformed protocol version"),
        }
        let (mut workers, mut thresholds, mut region, mut priority) = (None, None, None, None);
        for w in words {
            let Some((k, v)) = w.split_once('=') else {
                return err(format!("malformed field {w:?} (expected key=value)"));
            };
            match k {
                "workers" => workers = Some(parse_list::<u32>(k, v, MAX_WORKERS)?),
                "thresholds" => thresholds = Some(parse_list::<u64>(k, v, MAX_THRESHOLDS)?),
                "region" => {
                    region = Some(match v {
                        "0" => false,
                        "1" => true,
                        _ => return err(format!("region: {v:?} is not 0 or 1")),
                    })
                }
                "priority" => match v.parse::<u8>() {
                    Ok(p) if p <= MAX_PRIORITY => priority = Some(p),
                    _ => return err(format!("priority: {v:?} is not a level 0..={MAX_PRIORITY}")),
                },
                _ => return err(format!("unknown field {k:?}")),
            }
        }
        let workers = workers.ok_or_else(|| ProtocolError("missing workers=".into()))?;
        if workers.contains(&0) {
            return err("workers: tid 0 is not a thread");
        }
        Ok(Self {
            workers,
            thresholds_ns: thresholds.unwrap_or_default(),
            reuse_region: region.unwrap_or(false),
            priority,
        })
    }
}

/// The second step: bind worker threads (in worker-slot order).
///
/// ```
/// use tailctl_rt::kernel::protocol::Bind;
/// let b = Bind { workers: vec![7, 8] };
/// assert_eq!(Bind::parse(&b.to_line()).unwrap(), b);
/// assert!(Bind::parse("BIND").is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bind {
    /// Kernel thread ids of the workers.
    pub workers: Vec<u32>,
}

impl Bind {
    /// The request line, with its newline.
    pub fn to_line(&self) -> String {
        let tids: Vec<String> = self.workers.iter().map(u32::to_string).collect();
        format!("BIND {}\n", tids.join(","))
    }

    /// Parse a BIND line.
    pub fn parse(line: &str) -> Result<Self, ProtocolError> {
        let line = line.trim_end_matches(['\n', '\r']);
        let Some(list) = line.strip_prefix("BIND ") else {
            return err("expected BIND <tid>,<tid>,...");
        };
        let workers = parse_list::<u32>("BIND", list, MAX_WORKERS)?;
        if workers.is_empty() {
            return err("BIND: at least one tid is needed");
        }
        if workers.contains(&0) {
            return err("BIND: tid 0 is not a thread");
        }
        Ok(Self { workers })
    }
}

/// The daemon's reply.
///
/// ```
/// use tailctl_rt::kernel::protocol::Reply;
/// assert_eq!(Reply::parse("OK service=3\n").unwrap(), Reply::Ok { service: 3 });
/// assert_eq!(Reply::parse("ERR no").unwrap(), Reply::Err("no".into()));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// Registered in service slot `service`; the region fd is attached.
    Ok {
        /// The daemon's slot for this service.
        service: u32,
    },
    /// Refused, with the daemon's reason.
    Err(String),
}

impl Reply {
    /// The reply line, with its newline.
    pub fn to_line(&self) -> String {
        match self {
            Reply::Ok { service } => format!("OK service={service}\n"),
            Reply::Err(why) => format!("ERR {}\n", why.replace('\n', " ")),
        }
    }

    /// Parse a reply line.
    pub fn parse(line: &str) -> Result<Self, ProtocolError> {
        let line = line.trim_end_matches(['\n', '\r']);
        if let Some(why) = line.strip_prefix("ERR ") {
            return Ok(Reply::Err(why.to_string()));
        }
        if let Some(rest) = line.strip_prefix("OK service=") {
            return rest
                .parse()
                .map(|service| Reply::Ok { service })
                .map_err(|_| ProtocolError(format!("malformed service slot {rest:?}")));
        }
        err(format!("unexpected reply {line:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_requests_say_what_is_wrong() {
        let cases = [
            ("REGISTER", "version"),
            ("REGISTER 2 workers=1", "version 2"),
            ("REGISTER 1", "missing workers"),
            ("REGISTER 1 workers=1,x", "entry 2"),
            ("REGISTER 1 workers=0", "tid 0"),
            ("REGISTER 1 workers=1 region=2", "region"),
            ("REGISTER 1 workers=1 color=red", "unknown field"),
            ("REGISTER 1 workers=1 junk", "malformed field"),
        ];
        for (line, want) in cases {
            let e = Register::parse(line).unwrap_err().to_string();
            assert!(e.contains(want), "{line:?}: {e}");
        }
        let many = (1..=MAX_WORKERS as u32 + 1)
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(",");
        assert!(Register::parse(&format!("REGISTER 1 workers={many}"))
            .unwrap_err()
            .to_string()
            .contains("at most"));
    }

    #[test]
    fn round_trips() {
        let r = Register {
            workers: vec![1, 2, 3],
            thresholds_ns: vec![],
            reuse_region: true,
            priority: None,
        };
        assert_eq!(Register::parse(&r.to_line()).unwrap(), r);
        let r = Register {
            priority: Some(MAX_PRIORITY),
            ..r
        };
        assert_eq!(Register::parse(&r.to_line()).unwrap(), r);
        for bad in ["8", "-1", "x", ""] {
            let line = format!("REGISTER 1 workers=1 priority={bad}");
            assert!(Register::parse(&line)
                .unwrap_err()
                .to_string()
                .contains("priority"));
        }
        for reply in [Reply::Ok { service: 15 }, Reply::Err("busy".into())] {
            assert_eq!(Reply::parse(&reply.to_line()).unwrap(), reply);
        }
    }
}
