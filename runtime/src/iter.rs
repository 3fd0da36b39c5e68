//! Parallel iterators over slices and ranges: a small `rayon::iter`.
//!
//! ```
//! use tailctl_rt::prelude::*;
//! let pool = tailctl_rt::Pool::builder().workers(2).build().unwrap();
//! let (squares, total) = pool
//!     .submit(|| {
//!         let v: Vec<u64> = (0..1000u64).collect();
//!         let squares: Vec<u64> = v.par_iter().map(|x| x * x).collect();
//!         let total: u64 = (0..1000u64).into_par_iter().sum();
//!         (squares, total)
//!     })
//!     .wait()
//!     .unwrap();
//! assert_eq!(squares[999], 998_001);
//! assert_eq!(total, 499_500);
//! ```
//!
//! # Design
//!
//! Every iterator here is *indexed*: it knows its length and can produce the
//! items of any sub-range of `0..len`, on any thread, as an ordinary
//! [`Iterator`] (the hidden `iter_range`). A slice hands out a sub-slice, a
//! range a sub-range, and the adapters compose: [`Map`] maps its base's
//! sub-range, [`Enumerate`] zips it with the indices. That is all a
//! consumer needs, so there are no producers, consumers or splitting traits
//! as in rayon: the consumers (`for_each`, `sum`, `collect`) hand
//! `0..len` to the engine of [`parallel_for`](crate::parallel_for)
//! (`join::split_reduce`), which splits it adaptively with
//! [`join`](crate::join) (about one piece per worker, more where thieves
//! take pieces, never shorter than [`with_min_len`](ParallelIterator::with_min_len)),
//! runs each piece sequentially, and combines the pieces' results pairwise,
//! left with right:
//!
//! * `for_each`: nothing to combine;
//! * `sum`: each piece sums its items (`S: Sum<Item>`), pieces add up with
//!   `S: Sum<S>`, in index order (so non-associative sums, e.g. of floats,
//!   may differ from the sequential one only by rounding);
//! * `collect::<Vec<_>>()`: the vector is allocated once, and each piece
//!   writes item `i` into slot `i` of its spare capacity (order preserved,
//!   no copies). A piece returns a guard owning the slots it wrote; adjacent
//!   guards merge. If anything panics, the guards alive drop exactly the
//!   items written (the stack unwinds through `join`, which keeps the
//!   result of the other half until it is dropped), and the vector frees
//!   its buffer without reading it. Only when every slot is written does
//!   the vector take ownership (`set_len`).
//!
//! A piece runs in blocks of [`BLOCK`] items, each after an abort checkpoint
//! (see `control`), so an aborted request stops within a block.
//!
//! Where it runs: inside a request (on a worker), in parallel on the
//! worker's pool. Outside any pool, or on a one-worker pool, the whole
//! range runs sequentially on the calling thread, in order, with the same
//! results — as [`join`](crate::join) does outside a pool (there is no
//! global pool to fall back to, unlike rayon).
//!
//! A panic in a closure propagates like a panic in `join`: out of the
//! consumer, after the other pieces have stopped, to the request's handle.
//!
//! The traits are sealed: the hidden methods are the contract between this
//! module's types and may change.

use crate::control::AbortProbe;
use crate::join::split_reduce;
use std::iter::Sum;
use std::marker::PhantomData;
use std::ops::Range;

/// Items a piece runs between two abort checkpoints.
///
/// ```
/// use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
/// use std::sync::Arc;
/// use tailctl_rt::{iter::BLOCK, prelude::*, Pool, RequestError};
/// let pool = Pool::builder().workers(1).build().unwrap();
/// let (started, ran) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
/// let (s2, r2) = (started.clone(), ran.clone());
/// let h = pool.submit(move || {
///     (0..100 * BLOCK).into_par_iter().for_each(|_| {
///         s2.store(true, Ordering::SeqCst);
///         r2.fetch_add(1, Ordering::SeqCst);
///         while !tailctl_rt::is_current_request_aborted() {
///             std::thread::yield_now();
///         }
///     })
/// });
/// while !started.load(Ordering::SeqCst) {
///     std::thread::yield_now();
/// }
/// h.abort();
/// assert_eq!(h.wait(), Err(RequestError::Aborted));
/// // The block that saw the abort finished; no later block started.
/// assert_eq!(ran.load(Ordering::SeqCst), BLOCK);
/// ```
pub const BLOCK: usize = 1024;

mod private {
    pub trait Sealed {}
}

/// A parallel iterator of known length (see the [module](self) comment).
///
/// ```
/// use tailctl_rt::prelude::*;
/// let v = vec![1, 2, 3];
/// let it = v.par_iter().map(|x| x * 2);
/// assert_eq!(it.len(), 3);
/// assert_eq!(it.collect::<Vec<_>>(), [2, 4, 6]); // outside a pool: sequential
/// ```
pub trait ParallelIterator: Sized + Sync + private::Sealed {
    /// The type of the items.
    type Item: Send;

    /// Number of items.
    ///
    /// ```
    /// use tailctl_rt::prelude::*;
    /// assert_eq!((3..10usize).into_par_iter().len(), 7);
    /// ```
    fn len(&self) -> usize;

    /// Whether there are no items.
    ///
    /// ```
    /// use tailctl_rt::prelude::*;
    /// #[allow(clippy::reversed_empty_ranges)]
    /// let r = 5..3u32;
    /// assert!(r.into_par_iter().is_empty());
    /// ```
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The items of `range` (within `0..len()`), in order.
    ///
    /// # Safety
    ///
    /// Over the life of `self`, each index is passed in at most one call
    /// (mutable slices hand out `&mut` items).
    #[doc(hidden)]
    unsafe fn iter_range(&self, range: Range<usize>) -> impl Iterator<Item = Self::Item> + '_;

    /// The shortest piece to split into.
    #[doc(hidden)]
    fn min_len(&self) -> usize {
        1
    }

    /// Never splits into pieces shorter than `min` items (for cheap items,
    /// where a task per few items would cost more than it brings).
    ///
    /// ```
    /// use tailctl_rt::prelude::*;
    /// let pool = tailctl_rt::Pool::builder().workers(2).build().unwrap();
    /// let v: Vec<usize> = pool
    ///     .submit(|| (0..10_000usize).into_par_iter().with_min_len(1000).map(|i| i % 7).collect())
    ///     .wait()
    ///     .unwrap();
    /// assert_eq!(v, (0..10_000).map(|i| i % 7).collect::<Vec<_>>());
    /// ```
    fn with_min_len(self, min: usize) -> MinLen<Self> {
        MinLen {
            base: self,
            min: min.max(1),
        }
    }

    /// Applies `f` to each item.
    ///
    /// ```
    /// use tailctl_rt::prelude::*;
    /// let pool = tailctl_rt::Pool::builder().workers(2).build().unwrap();
    /// let words = vec!["a", "bb", "ccc"];
    /// let lens: Vec<usize> = pool
    ///     .submit(move || words.par_iter().map(|w| w.len()).collect())
    ///     .wait()
    ///     .unwrap();
    /// assert_eq!(lens, [1, 2, 3]);
    /// ```
    fn map<R, F>(self, f: F) -> Map<Self, F>
    where
        F: Fn(Self::Item) -> R + Sync,
        R: Send,
    {
        Map { base: self, f }
    }

    /// Pairs each item with its index.
    ///
    /// ```
    /// use tailctl_rt::prelude::*;
    /// let v = ['a', 'b'];
    /// let e: Vec<(usize, &char)> = v.par_iter().enumerate().collect();
    /// assert_eq!(e, [(0, &'a'), (1, &'b')]);
    /// ```
    fn enumerate(self) -> Enumerate<Self> {
        Enumerate { base: self }
    }

    /// Calls `f` on every item, in parallel, in no particular order.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use tailctl_rt::prelude::*;
    /// let pool = tailctl_rt::Pool::builder().workers(2).build().unwrap();
    /// let sum = pool
    ///     .submit(|| {
    ///         let sum = AtomicU64::new(0);
    ///         (1..=100u64).collect::<Vec<_>>().par_iter().for_each(|x| {
    ///             sum.fetch_add(*x, Ordering::Relaxed);
    ///         });
    ///         sum.into_inner()
    ///     })
    ///     .wait()
    ///     .unwrap();
    /// assert_eq!(sum, 5050);
    /// ```
    fn for_each<F>(self, f: F)
    where
        F: Fn(Self::Item) + Sync,
    {
        let probe = AbortProbe::current();
        drive(
            &self,
            &|piece| {
                for_blocks(piece, probe, |b| {
                    // SAFETY: `drive` passes disjoint pieces of `0..len`,
                    // each once, and `for_blocks` disjoint blocks of a piece.
                    unsafe { self.iter_range(b) }.for_each(&f)
                })
            },
            &|(), ()| (),
        )
    }

    /// Sums the items (`S` adds up partial sums too, as rayon's `sum`).
    ///
    /// ```
    /// use tailctl_rt::prelude::*;
    /// let pool = tailctl_rt::Pool::builder().workers(2).build().unwrap();
    /// let s: u64 = pool.submit(|| (0..1_000_000u64).into_par_iter().sum()).wait().unwrap();
    /// assert_eq!(s, 499_999_500_000);
    /// let f: f64 = [0.5f64, 1.5].par_iter().sum(); // outside a pool
    /// assert_eq!(f, 2.0);
    /// ```
    fn sum<S>(self) -> S
    where
        S: Send + Sum<Self::Item> + Sum<S>,
    {
        let probe = AbortProbe::current();
        drive(
            &self,
            &|piece| {
                let mut parts = Vec::with_capacity(piece.len().div_ceil(BLOCK));
                for_blocks(piece, probe, |b| {
                    // SAFETY: as in `for_each`.
                    parts.push(S::sum(unsafe { self.iter_range(b) }))
                });
                parts.into_iter().sum::<S>()
            },
            &|a, b| [a, b].into_iter().sum::<S>(),
        )
    }

    /// Collects the items, in order (into a `Vec`).
    ///
    /// ```
    /// use tailctl_rt::prelude::*;
    /// let pool = tailctl_rt::Pool::builder().workers(2).build().unwrap();
    /// let v: Vec<String> = pool
    ///     .submit(|| (0..5u32).into_par_iter().map(|i| i.to_string()).collect())
    ///     .wait()
    ///     .unwrap();
    /// assert_eq!(v, ["0", "1", "2", "3", "4"]);
    /// ```
    fn collect<C>(self) -> C
    where
        C: FromParallelIterator<Self::Item>,
    {
        C::from_par_iter(self)
    }
}

/// Runs `0..iter.len()` through the parallel loop engine: `leaf` per piece,
/// `combine` for adjacent pieces (left, right).
fn drive<I, R, L, C>(iter: &I, leaf: &L, combine: &C) -> R
where
    I: ParallelIterator,
    R: Send,
    L: Fn(Range<usize>) -> R + Sync,
    C: Fn(R, R) -> R + Sync,
{
    split_reduce(0..iter.len(), iter.min_len(), leaf, combine)
}

/// Calls `f` on consecutive blocks of at most [`BLOCK`] items of `piece`,
/// each after an abort checkpoint and a priority checkpoint.
fn for_blocks(piece: Range<usize>, probe: AbortProbe<'_>, mut f: impl FnMut(Range<usize>)) {
    let mut start = piece.start;
    while start < piece.end {
        probe.check();
        crate::registry::yield_to_higher();
        let end = start.saturating_add(BLOCK).min(piece.end);
        f(start..end);
        start = end;
    }
}

/// Something a parallel iterator can be turned into: `(0..n).into_par_iter()`,
/// `slice.into_par_iter()`, and every parallel iterator itself.
///
/// ```
/// use tailctl_rt::prelude::*;
/// fn total<I: IntoParallelIterator<Item = u32>>(it: I) -> u32 {
///     it.into_par_iter().sum()
/// }
/// assert_eq!(total(0..4u32), 6);
/// assert_eq!(total((0..4u32).into_par_iter().map(|x| x * 2)), 12);
/// ```
pub trait IntoParallelIterator {
    /// The parallel iterator.
    type Iter: ParallelIterator<Item = Self::Item>;
    /// Its items.
    type Item: Send;

    /// Makes the parallel iterator.
    ///
    /// ```
    /// use tailctl_rt::prelude::*;
    /// let v: Vec<i64> = (-2..2i64).into_par_iter().collect();
    /// assert_eq!(v, [-2, -1, 0, 1]);
    /// ```
    fn into_par_iter(self) -> Self::Iter;
}

impl<I: ParallelIterator> IntoParallelIterator for I {
    type Iter = I;
    type Item = I::Item;
    fn into_par_iter(self) -> I {
        self
    }
}

/// `par_iter()` on anything whose reference is [`IntoParallelIterator`]
/// (slices, vectors), as rayon's.
///
/// ```
/// use tailctl_rt::prelude::*;
/// let v = vec![3, 1, 2];
/// let max_plus_one: Vec<i32> = v.par_iter().map(|x| x + 1).collect();
/// assert_eq!(max_plus_one, [4, 2, 3]);
/// ```
pub trait IntoParallelRefIterator<'data> {
    /// The parallel iterator.
    type Iter: ParallelIterator<Item = Self::Item>;
    /// Its items (references).
    type Item: Send + 'data;

    /// Iterates over `&self`'s items.
    ///
    /// ```
    /// use tailctl_rt::prelude::*;
    /// let a = [1u8, 2, 3];
    /// assert_eq!(a.par_iter().map(|&x| x as u32).sum::<u32>(), 6);
    /// ```
    fn par_iter(&'data self) -> Self::Iter;
}

impl<'data, I: 'data + ?Sized> IntoParallelRefIterator<'data> for I
where
    &'data I: IntoParallelIterator,
{
    type Iter = <&'data I as IntoParallelIterator>::Iter;
    type Item = <&'data I as IntoParallelIterator>::Item;
    fn par_iter(&'data self) -> Self::Iter {
        self.into_par_iter()
    }
}

/// `par_iter_mut()` on anything whose mutable reference is
/// [`IntoParallelIterator`] (slices, vectors), as rayon's.
///
/// ```
/// use tailctl_rt::prelude::*;
/// let pool = tailctl_rt::Pool::builder().workers(2).build().unwrap();
/// let v = pool
///     .submit(|| {
///         let mut v: Vec<u32> = (0..100).collect();
///         v.par_iter_mut().for_each(|x| *x *= 3);
///         v
///     })
///     .wait()
///     .unwrap();
/// assert_eq!(v[99], 297);
/// ```
pub trait IntoParallelRefMutIterator<'data> {
    /// The parallel iterator.
    type Iter: ParallelIterator<Item = Self::Item>;
    /// Its items (mutable references).
    type Item: Send + 'data;

    /// Iterates over `&mut self`'s items.
    ///
    /// ```
    /// use tailctl_rt::prelude::*;
    /// let mut a = [1, 2, 3];
    /// a.par_iter_mut().enumerate().for_each(|(i, x)| *x += i);
    /// assert_eq!(a, [1, 3, 5]);
    /// ```
    fn par_iter_mut(&'data mut self) -> Self::Iter;
}

impl<'data, I: 'data + ?Sized> IntoParallelRefMutIterator<'data> for I
where
    &'data mut I: IntoParallelIterator,
{
    type Iter = <&'data mut I as IntoParallelIterator>::Iter;
    type Item = <&'data mut I as IntoParallelIterator>::Item;
    fn par_iter_mut(&'data mut self) -> Self::Iter {
        self.into_par_iter()
    }
}

/// A collection a parallel iterator can be collected into (`Vec<T>`).
///
/// ```
/// use tailctl_rt::prelude::*;
/// let v = Vec::from_par_iter((0..3u8).into_par_iter());
/// assert_eq!(v, [0, 1, 2]);
/// ```
pub trait FromParallelIterator<T: Send> {
    /// Collects `iter`.
    ///
    /// ```
    /// use tailctl_rt::prelude::*;
    /// let v: Vec<u8> = FromParallelIterator::from_par_iter([7u8, 8].par_iter().map(|x| x + 1));
    /// assert_eq!(v, [8, 9]);
    /// ```
    fn from_par_iter<I: ParallelIterator<Item = T>>(iter: I) -> Self;
}

impl<T: Send> FromParallelIterator<T> for Vec<T> {
    fn from_par_iter<I: ParallelIterator<Item = T>>(iter: I) -> Self {
        let len = iter.len();
        let mut v: Vec<T> = Vec::with_capacity(len);
        let base = SendPtr(v.as_mut_ptr());
        let probe = AbortProbe::current();
        let all = drive(
            &iter,
            &|piece| {
                let mut run = Filled {
                    base,
                    start: piece.start,
                    len: 0,
                };
                let end = piece.end;
                for_blocks(piece, probe, |b| {
                    // SAFETY: as in `for_each`: each index once.
                    for x in unsafe { iter.iter_range(b) } {
                        let i = run.start + run.len;
                        assert!(i < end, "a parallel iterator yielded too many items");
                        // SAFETY: `i < end <= len`, within the capacity;
                        // slot `i` belongs to this piece only and is
                        // written once; `run` owns it from here on.
                        unsafe { base.0.add(i).write(x) };
                        run.len += 1;
                    }
                });
                assert_eq!(
                    run.start + run.len,
                    end,
                    "a parallel iterator yielded too few items"
                );
                run
            },
            &Filled::merge,
        );
        assert!(all.start == 0 && all.len == len);
        std::mem::forget(all);
        // SAFETY: `all` owned slots `0..len`, all written; its ownership
        // passes to `v` (it was forgotten, so nothing drops them twice).
        unsafe { v.set_len(len) };
        v
    }
}

/// A pointer to the collect buffer, shared by the pieces.
struct SendPtr<T>(*mut T);

impl<T> Clone for SendPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SendPtr<T> {}

// SAFETY: the pieces write disjoint slots through it and each slot's item is
// owned by one `Filled` at a time; sending a `T` across threads needs `T: Send`.
unsafe impl<T: Send> Send for SendPtr<T> {}
// SAFETY: as above; sharing the pointer only lets a piece write its own slots.
unsafe impl<T: Send> Sync for SendPtr<T> {}

/// Owns the initialized slots `start..start + len` of the collect buffer and
/// drops them if dropped (a panic elsewhere in the collect).
struct Filled<T> {
    base: SendPtr<T>,
    start: usize,
    len: usize,
}

impl<T> Filled<T> {
    /// Merges adjacent runs (left, right). A non-adjacent pair (impossible:
    /// pieces are adjacent and each fills its whole range) panics, and both
    /// then drop their own slots.
    fn merge(a: Filled<T>, b: Filled<T>) -> Filled<T> {
        assert_eq!(a.start + a.len, b.start, "collect pieces not adjacent");
        let merged = Filled {
            base: a.base,
            start: a.start,
            len: a.len + b.len,
        };
        std::mem::forget(a);
        std::mem::forget(b);
        merged
    }
}

impl<T> Drop for Filled<T> {
    fn drop(&mut self) {
        // SAFETY: these slots were written and are owned by this run alone
        // (merged runs were forgotten), so each item is dropped exactly once;
        // the buffer outlives every run (the collect waits for all pieces,
        // and unwinding drops the runs before the vector).
        unsafe {
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(
                self.base.0.add(self.start),
                self.len,
            ))
        }
    }
}

// SAFETY: a run owns `T`s in disjoint slots; moving it to another thread moves
// those `T`s, which `T: Send` allows.
unsafe impl<T: Send> Send for Filled<T> {}

// ------------------------------------------------------------------ sources

/// Parallel iterator over `&[T]` (from [`par_iter`](IntoParallelRefIterator::par_iter)).
///
/// ```
/// use tailctl_rt::prelude::*;
/// let it: tailctl_rt::iter::SliceIter<'_, u8> = [1u8, 2].par_iter();
/// assert_eq!(it.len(), 2);
/// ```
#[derive(Debug)]
pub struct SliceIter<'data, T> {
    slice: &'data [T],
}

impl<T> private::Sealed for SliceIter<'_, T> {}

impl<'data, T: Sync + 'data> ParallelIterator for SliceIter<'data, T> {
    type Item = &'data T;
    fn len(&self) -> usize {
        self.slice.len()
    }
    unsafe fn iter_range(&self, range: Range<usize>) -> impl Iterator<Item = &'data T> + '_ {
        let slice: &'data [T] = self.slice;
        slice[range].iter()
    }
}

impl<'data, T: Sync + 'data> IntoParallelIterator for &'data [T] {
    type Iter = SliceIter<'data, T>;
    type Item = &'data T;
    fn into_par_iter(self) -> SliceIter<'data, T> {
        SliceIter { slice: self }
    }
}

impl<'data, T: Sync + 'data> IntoParallelIterator for &'data Vec<T> {
    type Iter = SliceIter<'data, T>;
    type Item = &'data T;
    fn into_par_iter(self) -> SliceIter<'data, T> {
        SliceIter { slice: self }
    }
}

impl<'data, T: Sync + 'data, const N: usize> IntoParallelIterator for &'data [T; N] {
    type Iter = SliceIter<'data, T>;
    type Item = &'data T;
    fn into_par_iter(self) -> SliceIter<'data, T> {
        SliceIter { slice: self }
    }
}

/// Parallel iterator over `&mut [T]` (from
/// [`par_iter_mut`](IntoParallelRefMutIterator::par_iter_mut)).
///
/// ```
/// use tailctl_rt::prelude::*;
/// let mut v = vec![1, 2];
/// let it: tailctl_rt::iter::SliceIterMut<'_, i32> = v.par_iter_mut();
/// it.for_each(|x| *x = -*x);
/// assert_eq!(v, [-1, -2]);
/// ```
#[derive(Debug)]
pub struct SliceIterMut<'data, T> {
    ptr: *mut T,
    len: usize,
    marker: PhantomData<&'data mut [T]>,
}

// SAFETY: it stands for a `&'data mut [T]`, which is `Send` iff `T: Send`.
unsafe impl<T: Send> Send for SliceIterMut<'_, T> {}
// SAFETY: shared, it only hands out `&mut` to distinct items (the
// `iter_range` contract), each possibly on another thread: `T: Send`.
unsafe impl<T: Send> Sync for SliceIterMut<'_, T> {}

impl<T> private::Sealed for SliceIterMut<'_, T> {}

impl<'data, T: Send + 'data> ParallelIterator for SliceIterMut<'data, T> {
    type Item = &'data mut T;
    fn len(&self) -> usize {
        self.len
    }
    unsafe fn iter_range(&self, range: Range<usize>) -> impl Iterator<Item = &'data mut T> + '_ {
        assert!(range.start <= range.end && range.end <= self.len);
        // SAFETY: in bounds (checked); the items are borrowed mutably for
        // 'data by `self`, and the caller passes each index at most once, so
        // no two `&mut` to one item exist.
        let part: &'data mut [T] =
            unsafe { std::slice::from_raw_parts_mut(self.ptr.add(range.start), range.len()) };
        part.iter_mut()
    }
}

impl<'data, T: Send + 'data> IntoParallelIterator for &'data mut [T] {
    type Iter = SliceIterMut<'data, T>;
    type Item = &'data mut T;
    fn into_par_iter(self) -> SliceIterMut<'data, T> {
        SliceIterMut {
            ptr: self.as_mut_ptr(),
            len: self.len(),
            marker: PhantomData,
        }
    }
}

impl<'data, T: Send + 'data> IntoParallelIterator for &'data mut Vec<T> {
    type Iter = SliceIterMut<'data, T>;
    type Item = &'data mut T;
    fn into_par_iter(self) -> SliceIterMut<'data, T> {
        self.as_mut_slice().into_par_iter()
    }
}

impl<'data, T: Send + 'data, const N: usize> IntoParallelIterator for &'data mut [T; N] {
    type Iter = SliceIterMut<'data, T>;
    type Item = &'data mut T;
    fn into_par_iter(self) -> SliceIterMut<'data, T> {
        self.as_mut_slice().into_par_iter()
    }
}

/// Parallel iterator over a range of integers (from
/// [`into_par_iter`](IntoParallelIterator::into_par_iter) on `a..b`).
///
/// ```
/// use tailctl_rt::prelude::*;
/// let it: tailctl_rt::iter::RangeIter<i32> = (-3..3).into_par_iter();
/// assert_eq!(it.sum::<i32>(), -3);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct RangeIter<T> {
    start: T,
    len: usize,
}

impl<T> private::Sealed for RangeIter<T> {}

macro_rules! range_iter {
    ($($t:ty => $u:ty),* $(,)?) => {$(
        impl ParallelIterator for RangeIter<$t> {
            type Item = $t;
            fn len(&self) -> usize {
                self.len
            }
            unsafe fn iter_range(&self, range: Range<usize>) -> impl Iterator<Item = $t> + '_ {
                // Modular arithmetic: `start + i` fits in `$t` for `i <= len`.
                let s = self.start.wrapping_add(range.start as $t);
                let e = self.start.wrapping_add(range.end as $t);
                s..e
            }
        }

        impl IntoParallelIterator for Range<$t> {
            type Iter = RangeIter<$t>;
            type Item = $t;
            fn into_par_iter(self) -> RangeIter<$t> {
                let len = if self.start < self.end {
                    usize::try_from(self.end.wrapping_sub(self.start) as $u)
                        .expect("range longer than usize::MAX")
                } else {
                    0
                };
                RangeIter { start: self.start, len }
            }
        }
    )*};
}

range_iter! {
    u8 => u8, u16 => u16, u32 => u32, u64 => u64, usize => usize,
    i8 => u8, i16 => u16, i32 => u32, i64 => u64, isize => usize,
}

// ----------------------------------------------------------------- adapters

/// Applies a function to each item (from [`ParallelIterator::map`]).
///
/// ```
/// use tailctl_rt::prelude::*;
/// let m = (0..3u8).into_par_iter().map(|x| x + 1);
/// assert_eq!(m.collect::<Vec<_>>(), [1, 2, 3]);
/// ```
pub struct Map<I, F> {
    base: I,
    f: F,
}

impl<I: std::fmt::Debug, F> std::fmt::Debug for Map<I, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Map").field("base", &self.base).finish()
    }
}

impl<I, F> private::Sealed for Map<I, F> {}

impl<I, F, R> ParallelIterator for Map<I, F>
where
    I: ParallelIterator,
    F: Fn(I::Item) -> R + Sync,
    R: Send,
{
    type Item = R;
    fn len(&self) -> usize {
        self.base.len()
    }
    fn min_len(&self) -> usize {
        self.base.min_len()
    }
    unsafe fn iter_range(&self, range: Range<usize>) -> impl Iterator<Item = R> + '_ {
        // SAFETY: forwarded contract (the same indices).
        unsafe { self.base.iter_range(range) }.map(&self.f)
    }
}

/// Pairs items with their indices (from [`ParallelIterator::enumerate`]).
///
/// ```
/// use tailctl_rt::prelude::*;
/// let e = (10..12u32).into_par_iter().enumerate();
/// assert_eq!(e.collect::<Vec<_>>(), [(0, 10), (1, 11)]);
/// ```
#[derive(Debug)]
pub struct Enumerate<I> {
    base: I,
}

impl<I> private::Sealed for Enumerate<I> {}

impl<I: ParallelIterator> ParallelIterator for Enumerate<I> {
    type Item = (usize, I::Item);
    fn len(&self) -> usize {
        self.base.len()
    }
    fn min_len(&self) -> usize {
        self.base.min_len()
    }
    unsafe fn iter_range(&self, range: Range<usize>) -> impl Iterator<Item = Self::Item> + '_ {
        // SAFETY: forwarded contract (the same indices).
        range.clone().zip(unsafe { self.base.iter_range(range) })
    }
}

/// Limits how short the pieces get (from [`ParallelIterator::with_min_len`]).
///
/// ```
/// use tailctl_rt::prelude::*;
/// let it = (0..100u32).into_par_iter().with_min_len(10);
/// assert_eq!(it.sum::<u32>(), 4950);
/// ```
#[derive(Debug)]
pub struct MinLen<I> {
    base: I,
    min: usize,
}

impl<I> private::Sealed for MinLen<I> {}

impl<I: ParallelIterator> ParallelIterator for MinLen<I> {
    type Item = I::Item;
    fn len(&self) -> usize {
        self.base.len()
    }
    fn min_len(&self) -> usize {
        self.base.min_len().max(self.min)
    }
    unsafe fn iter_range(&self, range: Range<usize>) -> impl Iterator<Item = I::Item> + '_ {
        // SAFETY: forwarded contract (the same indices).
        unsafe { self.base.iter_range(range) }
    }
}

/// The traits to bring in scope: `use tailctl_rt::prelude::*;` (as
/// `rayon::prelude`).
///
/// ```
/// use tailctl_rt::prelude::*;
/// assert_eq!([1, 2].par_iter().map(|x| x * 10).collect::<Vec<_>>(), [10, 20]);
/// ```
pub mod prelude {
    pub use super::{
        FromParallelIterator, IntoParallelIterator, IntoParallelRefIterator,
        IntoParallelRefMutIterator, ParallelIterator,
    };
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::prelude::*;

    #[test]
    fn ranges_of_every_width_cover_their_items() {
        assert_eq!((-128..127i8).into_par_iter().len(), 255);
        let v: Vec<i8> = (-128..127i8).into_par_iter().collect();
        assert_eq!(v, (-128..127i8).collect::<Vec<_>>());
        assert_eq!(
            (250..255u8).into_par_iter().collect::<Vec<_>>(),
            [250, 251, 252, 253, 254]
        );
        assert_eq!((u64::MAX - 2..u64::MAX).into_par_iter().len(), 2);
        #[allow(clippy::reversed_empty_ranges)]
        let empty = 5..1i32;
        assert_eq!(empty.into_par_iter().len(), 0);
    }

    #[test]
    fn a_panicking_collect_drops_exactly_what_it_wrote() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static LIVE: AtomicUsize = AtomicUsize::new(0);
        struct Counted;
        impl Counted {
            fn new() -> Self {
                LIVE.fetch_add(1, Ordering::SeqCst);
                Counted
            }
        }
        impl Drop for Counted {
            fn drop(&mut self) {
                LIVE.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let r = std::panic::catch_unwind(|| {
            (0..5000usize)
                .into_par_iter()
                .map(|i| {
                    assert!(i != 3000, "boom");
                    Counted::new()
                })
                .collect::<Vec<_>>()
        });
        assert!(r.is_err());
        assert_eq!(LIVE.load(Ordering::SeqCst), 0);
    }
}
