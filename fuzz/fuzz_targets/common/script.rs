//! The fuzzer's input read as a script of small numbers: every target turns its bytes into
//! operations with this reader, so the fuzzer steers the cores through deep states instead of
//! only throwing whole garbage messages at them. Reading past the end yields zeros (the script
//! ends when `done`).
#![allow(dead_code)]

pub struct Script<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Script<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Script { data, pos: 0 }
    }
    pub fn done(&self) -> bool {
        self.pos >= self.data.len()
    }
    pub fn u8(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    pub fn u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        for x in &mut b {
            *x = self.u8();
        }
        u64::from_le_bytes(b)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            u64::from(self.u16()) % n
        }
    }
    /// Up to `max` bytes, length first.
    pub fn bytes(&mut self, max: usize) -> Vec<u8> {
        let n = usize::from(self.u8()) % (max + 1);
        let end = (self.pos + n).min(self.data.len());
        let v = self.data.get(self.pos..end).unwrap_or_default().to_vec();
        self.pos = end;
        v
    }
}
