//! Byte-level primitives for the index codec: LEB128 varints and length-prefixed byte
//! strings, read with bounds checks so a crafted length never causes a large allocation.

use crate::Error;

/// Appends primitives to a growing buffer.
pub(crate) struct Writer {
    pub(crate) buf: Vec<u8>,
}

impl Writer {
    pub(crate) fn with_capacity(cap: usize) -> Self {
        Self {
            buf: Vec::with_capacity(cap),
        }
    }

    pub(crate) fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }

    pub(crate) fn raw(&mut self, v: &[u8]) {
        self.buf.extend_from_slice(v);
    }

    pub(crate) fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    /// Signed values (mtimes before 1970) as zigzag varints.
    pub(crate) fn zigzag(&mut self, v: i64) {
        self.varint(((v << 1) ^ (v >> 63)) as u64);
    }

    pub(crate) fn bytes(&mut self, v: &[u8]) {
        self.varint(v.len() as u64);
        self.raw(v);
    }
}

/// Reads primitives from a slice; every read is bounds-checked.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8, Error> {
        let b = *self.buf.get(self.pos).ok_or(Error::Truncated(what))?;
        self.pos += 1;
        Ok(b)
    }

    pub(crate) fn raw(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], Error> {
        if self.remaining() < n {
            return Err(Error::Truncated(what));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub(crate) fn array32(&mut self, what: &'static str) -> Result<[u8; 32], Error> {
        let s = self.raw(32, what)?;
        let mut out = [0u8; 32];
        out.copy_from_slice(s);
        Ok(out)
    }

    pub(crate) fn varint(&mut self, what: &'static str) -> Result<u64, Error> {
        let mut v: u64 = 0;
        for i in 0..10 {
            let b = self.u8(what)?;
            let part = u64::from(b & 0x7f);
            if i == 9 && b > 1 {
                return Err(Error::BadVarint(what));
            }
            v |= part << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(Error::BadVarint(what))
    }

    /// A varint that must not exceed `limit`.
    pub(crate) fn bounded(&mut self, what: &'static str, limit: u64) -> Result<u64, Error> {
        let v = self.varint(what)?;
        if v > limit {
            return Err(Error::LimitExceeded {
                what,
                value: v,
                limit,
            });
        }
        Ok(v)
    }

    pub(crate) fn u32_bounded(&mut self, what: &'static str) -> Result<u32, Error> {
        Ok(self.bounded(what, u64::from(u32::MAX))? as u32)
    }

    pub(crate) fn zigzag(&mut self, what: &'static str) -> Result<i64, Error> {
        let v = self.varint(what)?;
        Ok(((v >> 1) as i64) ^ -((v & 1) as i64))
    }

    /// A length-prefixed byte string of at most `limit` bytes.
    pub(crate) fn bytes(&mut self, what: &'static str, limit: u64) -> Result<&'a [u8], Error> {
        let n = self.bounded(what, limit)?;
        self.raw(n as usize, what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn varint_round_trip(v in any::<u64>(), s in any::<i64>()) {
            let mut w = Writer::with_capacity(32);
            w.varint(v);
            w.zigzag(s);
            let mut r = Reader::new(&w.buf);
            prop_assert_eq!(r.varint("v").expect("decodes"), v);
            prop_assert_eq!(r.zigzag("s").expect("decodes"), s);
            prop_assert_eq!(r.remaining(), 0);
        }
    }

    #[test]
    fn overlong_varint_is_an_error() {
        let bytes = [0xffu8; 11];
        let mut r = Reader::new(&bytes);
        assert!(matches!(r.varint("x"), Err(Error::BadVarint("x"))));
    }

    #[test]
    fn huge_length_does_not_allocate() {
        let mut w = Writer::with_capacity(16);
        w.varint(u64::MAX / 2);
        let mut r = Reader::new(&w.buf);
        assert!(matches!(
            r.bytes("name", 255),
            Err(Error::LimitExceeded { .. })
        ));
    }
}
