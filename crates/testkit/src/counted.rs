//! Buffers that count themselves while alive, for tests that check memory is freed.

use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;

/// A buffer holding `contents` that adds one to `live` now and takes it away when its last
/// share is dropped.
pub fn counted_bytes(live: &'static AtomicUsize, contents: &'static [u8]) -> Bytes {
    live.fetch_add(1, Ordering::SeqCst);
    Bytes::from_owner(Counted { live, contents })
}

/// The owner behind [`counted_bytes`].
struct Counted {
    live: &'static AtomicUsize,
    contents: &'static [u8],
}

impl AsRef<[u8]> for Counted {
    fn as_ref(&self) -> &[u8] {
        self.contents
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counted_buffer_is_counted_until_its_last_share_is_dropped() {
        static LIVE: AtomicUsize = AtomicUsize::new(0);
        let a = counted_bytes(&LIVE, b"abc");
        let b = a.clone();
        assert_eq!((LIVE.load(Ordering::SeqCst), &a[..]), (1, &b"abc"[..]));
        drop(a);
        assert_eq!(LIVE.load(Ordering::SeqCst), 1);
        drop(b);
        assert_eq!(LIVE.load(Ordering::SeqCst), 0);
    }
}
