//! Bounds-checked reading of little-endian numbers and byte runs off the
//! front of a slice, for the binary files the engine parses (every read
//! past the end is `None`, never a panic).

/// Reads off the front of a byte slice.
pub(crate) struct LeReader<'a>(&'a [u8]);

impl<'a> LeReader<'a> {
    /// A reader of `bytes`.
    pub(crate) fn new(bytes: &'a [u8]) -> LeReader<'a> {
        LeReader(bytes)
    }

    /// What is left.
    pub(crate) fn rest(&self) -> &'a [u8] {
        self.0
    }

    /// The next `n` bytes.
    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    /// The next `n` bytes, as UTF-8 text.
    pub(crate) fn text(&mut self, n: usize) -> Option<&'a str> {
        std::str::from_utf8(self.take(n)?).ok()
    }

    pub(crate) fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    pub(crate) fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }

    pub(crate) fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    pub(crate) fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}
