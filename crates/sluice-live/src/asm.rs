//! A small eBPF assembler: instructions by name, forward jumps to labels.
//!
//! sluice's eBPF programs are generated at start (the shield's from the
//! rules, the guard's SYN filter from its key prefixes), so they are
//! written here as Rust calls rather than C: `cargo build` needs no clang,
//! and a program is exactly as large as what it enforces (a rule file of
//! three rules is three rules of code, not a generic interpreter walking
//! tables of rules per packet).

// Registers, widths, operations and conditions name themselves (each is
// the eBPF one of that name): only what is not an opcode is documented.
#![allow(missing_docs)]

use crate::bpf::Insn;

/// Registers. `R0` returns, `R1`-`R5` are arguments (clobbered by calls),
/// `R6`-`R9` survive calls, `R10` is the read-only frame pointer.
pub type Reg = u8;
pub const R0: Reg = 0;
pub const R1: Reg = 1;
pub const R2: Reg = 2;
pub const R3: Reg = 3;
pub const R4: Reg = 4;
pub const R5: Reg = 5;
pub const R6: Reg = 6;
pub const R7: Reg = 7;
pub const R8: Reg = 8;
pub const R9: Reg = 9;
pub const FP: Reg = 10;

// Classes and fields (linux/bpf_common.h, linux/bpf.h).
const LD: u8 = 0x00;
const LDX: u8 = 0x01;
const ST: u8 = 0x02;
const STX: u8 = 0x03;
const JMP: u8 = 0x05;
const JMP32: u8 = 0x06;
const ALU64: u8 = 0x07;
const ALU: u8 = 0x04;
const IMM: u8 = 0x00;
const MEM: u8 = 0x60;
const K: u8 = 0x00;
const X: u8 = 0x08;
const DW: u8 = 0x18;
const END: u8 = 0xd0;
/// `BPF_ATOMIC`: a read-modify-write of memory (with `STX`).
const ATOMIC: u8 = 0xc0;
/// `BPF_CMPXCHG` (`0xf0 | BPF_FETCH`): the atomic's immediate.
const CMPXCHG: i32 = 0xf1;
const TO_BE: u8 = 0x08;
/// The helper `bpf_map_lookup_elem`.
const HELPER_MAP_LOOKUP_ELEM: i32 = 1;
/// `BPF_PSEUDO_MAP_FD`: an `ld_imm64` whose immediate is a map descriptor.
const PSEUDO_MAP_FD: u8 = 1;

/// Load and store widths.
#[derive(Clone, Copy, Debug)]
pub enum Size {
    B = 0x10,
    H = 0x08,
    W = 0x00,
    DW = 0x18,
}

/// ALU operations.
#[derive(Clone, Copy, Debug)]
pub enum Alu {
    Add = 0x00,
    Sub = 0x10,
    Mul = 0x20,
    /// Unsigned; by zero gives 0 (the generator never divides by zero).
    Div = 0x30,
    Or = 0x40,
    And = 0x50,
    Lsh = 0x60,
    Rsh = 0x70,
    Xor = 0xa0,
    Mov = 0xb0,
}

/// Jump conditions (unsigned unless named signed).
#[derive(Clone, Copy, Debug)]
pub enum Cond {
    Eq = 0x10,
    Gt = 0x20,
    Ge = 0x30,
    Set = 0x40,
    Ne = 0x50,
    Lt = 0xa0,
    Le = 0xb0,
}

/// A jump longer than eBPF's 16-bit offsets reach (a match over tens of
/// thousands of values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a jump of {distance} instructions at instruction {from}: eBPF jumps reach 32,767")]
pub struct TooFar {
    pub from: usize,
    pub distance: i64,
}

/// A jump target, bound once with [`Asm::bind`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Label(usize);

/// Instructions being written.
#[derive(Default)]
pub struct Asm {
    insns: Vec<Insn>,
    labels: Vec<Option<usize>>,
    /// (instruction index, label): jumps to patch when done.
    fixups: Vec<(usize, Label)>,
}

impl Asm {
    pub fn new() -> Self {
        Self::default()
    }

    /// Instructions so far.
    pub fn len(&self) -> usize {
        self.insns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.insns.is_empty()
    }

    /// A new, unbound label.
    pub fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    /// The next instruction is `l`'s target.
    pub fn bind(&mut self, l: Label) {
        debug_assert!(self.labels[l.0].is_none(), "label bound twice");
        self.labels[l.0] = Some(self.insns.len());
    }

    fn push(&mut self, code: u8, dst: Reg, src: Reg, off: i16, imm: i32) {
        self.insns.push(Insn::new(code, dst, src, off, imm));
    }

    /// `dst = imm` (sign-extended to 64 bits).
    pub fn mov_imm(&mut self, dst: Reg, imm: i32) {
        self.alu_imm(Alu::Mov, dst, imm);
    }

    /// `dst = src`.
    pub fn mov(&mut self, dst: Reg, src: Reg) {
        self.alu(Alu::Mov, dst, src);
    }

    /// `dst op= imm` (64-bit).
    pub fn alu_imm(&mut self, op: Alu, dst: Reg, imm: i32) {
        self.push(ALU64 | op as u8 | K, dst, 0, 0, imm);
    }

    /// `dst op= src` (64-bit).
    pub fn alu(&mut self, op: Alu, dst: Reg, src: Reg) {
        self.push(ALU64 | op as u8 | X, dst, src, 0, 0);
    }

    /// `dst = (u32) dst op imm`: 32-bit, zero-extended.
    pub fn alu32_imm(&mut self, op: Alu, dst: Reg, imm: i32) {
        self.push(ALU | op as u8 | K, dst, 0, 0, imm);
    }

    /// `dst = ntohs(dst)` / `ntohl` / `be64`: network order to host order
    /// (`bits` 16, 32 or 64; the upper bits are cleared).
    pub fn from_be(&mut self, dst: Reg, bits: i32) {
        self.push(ALU | END | TO_BE, dst, 0, 0, bits);
    }

    /// `dst = imm` (all 64 bits; two instruction slots).
    pub fn ld_imm64(&mut self, dst: Reg, imm: u64) {
        self.push(LD | DW | IMM, dst, 0, 0, imm as u32 as i32);
        self.push(0, 0, 0, 0, (imm >> 32) as u32 as i32);
    }

    /// `dst = the map open at fd` (for helper calls).
    pub fn ld_map(&mut self, dst: Reg, fd: i32) {
        self.push(LD | DW | IMM, dst, PSEUDO_MAP_FD, 0, fd);
        self.push(0, 0, 0, 0, 0);
    }

    /// `dst = *(size *)(src + off)`.
    pub fn ldx(&mut self, size: Size, dst: Reg, src: Reg, off: i16) {
        self.push(LDX | MEM | size as u8, dst, src, off, 0);
    }

    /// `*(size *)(dst + off) = src`.
    pub fn stx(&mut self, size: Size, dst: Reg, off: i16, src: Reg) {
        self.push(STX | MEM | size as u8, dst, src, off, 0);
    }

    /// `*(size *)(dst + off) = imm`.
    pub fn st_imm(&mut self, size: Size, dst: Reg, off: i16, imm: i32) {
        self.push(ST | MEM | size as u8, dst, 0, off, imm);
    }

    /// `r0 = cmpxchg((u64 *)(dst + off), r0, src)`: atomically, if the
    /// word equals `R0` it becomes `src`; `R0` gets the word as it was
    /// (so the write happened iff `R0` is unchanged). Kernel 5.12+.
    pub fn cmpxchg64(&mut self, dst: Reg, off: i16, src: Reg) {
        self.push(STX | ATOMIC | DW, dst, src, off, CMPXCHG);
    }

    /// `if dst cond imm goto l`.
    pub fn jmp_imm(&mut self, cond: Cond, dst: Reg, imm: i32, l: Label) {
        self.fixups.push((self.insns.len(), l));
        self.push(JMP | cond as u8 | K, dst, 0, 0, imm);
    }

    /// `if (u32) dst cond imm goto l`: the low 32 bits only, the immediate
    /// not sign-extended (IPv4 addresses past 127.255.255.255).
    pub fn jmp32_imm(&mut self, cond: Cond, dst: Reg, imm: u32, l: Label) {
        self.fixups.push((self.insns.len(), l));
        self.push(JMP32 | cond as u8 | K, dst, 0, 0, imm as i32);
    }

    /// `if dst cond src goto l`.
    pub fn jmp(&mut self, cond: Cond, dst: Reg, src: Reg, l: Label) {
        self.fixups.push((self.insns.len(), l));
        self.push(JMP | cond as u8 | X, dst, src, 0, 0);
    }

    /// `goto l`.
    pub fn ja(&mut self, l: Label) {
        self.fixups.push((self.insns.len(), l));
        self.push(JMP, 0, 0, 0, 0);
    }

    /// `r0 = helper(r1..r5)`.
    pub fn call(&mut self, helper: i32) {
        self.push(JMP | 0x80, 0, 0, 0, helper);
    }

    /// `r0 = bpf_map_lookup_elem(map, fp + key)`: the value's address, or
    /// 0 (clobbers R1-R5).
    pub fn lookup(&mut self, map_fd: i32, key: i16) {
        self.ld_map(R1, map_fd);
        self.mov(R2, FP);
        self.alu_imm(Alu::Add, R2, i32::from(key));
        self.call(HELPER_MAP_LOOKUP_ELEM);
    }

    /// `return r0`.
    pub fn exit(&mut self) {
        self.push(JMP | 0x90, 0, 0, 0, 0);
    }

    /// The program, every jump resolved and the instructions no path
    /// reaches left out (the verifier refuses dead code, and generating
    /// none is harder than removing it: a rule set that always decides
    /// early, an empty set). Panics on an unbound label (a generator bug);
    /// a jump too far for 16 bits is an error.
    pub fn finish(self) -> Result<Vec<Insn>, TooFar> {
        let mut targets: Vec<Option<usize>> = vec![None; self.insns.len()];
        for &(at, l) in &self.fixups {
            targets[at] = Some(self.labels[l.0].expect("a jump to a label never bound"));
        }
        // Reachability from the first instruction.
        let n = self.insns.len();
        let mut reached = vec![false; n];
        let mut todo = vec![0usize];
        while let Some(i) = todo.pop() {
            if i >= n || reached[i] {
                continue;
            }
            reached[i] = true;
            let code = self.insns[i].code;
            let class = code & 0x07;
            if code == LD | DW | IMM {
                reached[i + 1] = true;
                todo.push(i + 2);
            } else if class == JMP || class == JMP32 {
                match code & 0xf0 {
                    0x90 => {}
                    0x80 => todo.push(i + 1),
                    0x00 => todo.extend(targets[i]),
                    _ => {
                        todo.push(i + 1);
                        todo.extend(targets[i]);
                    }
                }
            } else {
                todo.push(i + 1);
            }
        }
        let mut at = vec![0usize; n + 1];
        let mut kept = 0;
        for i in 0..n {
            at[i] = kept;
            kept += usize::from(reached[i]);
        }
        at[n] = kept;
        let mut out = Vec::with_capacity(kept);
        for i in (0..n).filter(|&i| reached[i]) {
            let mut insn = self.insns[i];
            if let Some(t) = targets[i] {
                let off = at[t] as i64 - at[i] as i64 - 1;
                insn.off = i16::try_from(off).map_err(|_| TooFar { from: at[i], distance: off })?;
            }
            out.push(insn);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_count_from_the_next_instruction() {
        let mut a = Asm::new();
        let l = a.label();
        a.jmp_imm(Cond::Eq, R1, 0, l);
        a.mov_imm(R0, 1);
        a.bind(l);
        a.exit();
        let p = a.finish().unwrap();
        assert_eq!(p[0].off, 1);
        assert_eq!(p[0].code, 0x15);
        assert_eq!(p[1].code, 0xb7);
        assert_eq!(p[2].code, 0x95);
    }

    #[test]
    fn unreachable_instructions_are_left_out() {
        let mut a = Asm::new();
        let l = a.label();
        a.ja(l);
        a.mov_imm(R0, 1); // dead
        a.bind(l);
        a.mov_imm(R0, 2);
        a.exit();
        a.mov_imm(R0, 3); // dead
        a.exit();
        let p = a.finish().unwrap();
        assert_eq!(p.len(), 3);
        assert_eq!(p[0].off, 0);
        assert_eq!(p[1].imm, 2);
    }

    /// The bytes as linux/bpf.h spells them: `BPF_STX | BPF_ATOMIC |
    /// BPF_DW` (0xdb), imm `BPF_CMPXCHG` (0xf1), registers dst low nibble.
    #[test]
    fn cmpxchg_is_encoded_as_the_kernel_reads_it() {
        let mut a = Asm::new();
        a.cmpxchg64(R9, 8, R1);
        a.exit();
        let p = a.finish().unwrap();
        assert_eq!(p.len(), 2, "an atomic falls through");
        assert_eq!((p[0].code, p[0].regs, p[0].off, p[0].imm), (0xdb, 0x19, 8, 0xf1));
    }

    #[test]
    fn division_is_unsigned_64_bit() {
        let mut a = Asm::new();
        a.alu(Alu::Div, R2, R3);
        a.alu_imm(Alu::Div, R2, 7);
        let p = a.finish().unwrap();
        // BPF_ALU64 | BPF_DIV | BPF_X, then | BPF_K.
        assert_eq!((p[0].code, p[1].code, p[1].imm), (0x3f, 0x37, 7));
    }

    #[test]
    fn wide_immediates_take_two_slots() {
        let mut a = Asm::new();
        a.ld_imm64(R2, 0x0101_0101_0101_0101);
        let p = a.finish().unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].imm, 0x0101_0101);
        assert_eq!(p[1].imm, 0x0101_0101);
    }
}
