//! SplitMix64, a small deterministic generator for tests that draw their own numbers from a
//! seed: the same seed gives the same numbers on every machine, with no dependency.

/// A SplitMix64 generator.
///
/// # Examples
/// ```
/// use tuplekv_testkit::rng::SplitMix64;
/// let (mut a, mut b) = (SplitMix64::new(7), SplitMix64::new(7));
/// assert_eq!(a.below(10), b.below(10));
/// assert!((3..=5).contains(&a.between(3, 5)));
/// ```
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (slightly biased towards small ones, which tests do not mind).
    ///
    /// # Panics
    /// If `n` is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// A number in `min..=max`.
    ///
    /// # Panics
    /// If `max < min`, or the range is all of `u64`.
    pub fn between(&mut self, min: u64, max: u64) -> u64 {
        min + self.below(max - min + 1)
    }
}
