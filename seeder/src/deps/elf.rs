//! What the dynamic loader reads from an ELF object: class and machine, `PT_INTERP`,
//! and from the dynamic segment `DT_NEEDED`, `DT_RPATH`, `DT_RUNPATH`, `DT_SONAME` and
//! `DF_1_NODEFLIB`. Parsed with the `object` crate from the program headers only (as
//! `ld.so` does, so stripped section headers do not matter), reading just the ranges
//! needed rather than the whole file.

use std::fs::File;
use std::path::Path;

use object::elf;
use object::read::elf::{Dyn, FileHeader, ProgramHeader};
use object::{Endianness, FileKind, ReadCache, ReadRef};

/// The loader-relevant parts of an ELF file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ElfInfo {
    /// 64-bit class.
    pub class64: bool,
    /// `e_machine`.
    pub machine: u16,
    /// The program interpreter (`PT_INTERP`), if any.
    pub interp: Option<Vec<u8>>,
    /// `DT_NEEDED` names in order.
    pub needed: Vec<Vec<u8>>,
    /// `DT_RPATH` (already empty when a `DT_RUNPATH` exists: the loader ignores it then).
    pub rpath: Option<Vec<u8>>,
    /// `DT_RUNPATH`.
    pub runpath: Option<Vec<u8>>,
    /// `DT_SONAME`.
    pub soname: Option<Vec<u8>>,
    /// `DF_1_NODEFLIB`: skip the cache and the default directories for its needs.
    pub nodeflib: bool,
}

/// Why a file could not be read as ELF (wrapped by [`crate::Error`] with the file's path).
#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    /// The file does not start with the ELF magic number.
    #[error("not an ELF file (no ELF magic number)")]
    NotElf,
    /// It is ELF but malformed (the reason).
    #[error("malformed ELF: {0}")]
    Malformed(String),
    /// Reading failed.
    #[error(transparent)]
    Io(std::io::Error),
}

/// Reads the loader-relevant parts of the ELF file at `path`.
pub fn read(path: &Path) -> Result<ElfInfo, ElfError> {
    let file = File::open(path).map_err(ElfError::Io)?;
    let cache = ReadCache::new(file);
    let data = &cache;
    let magic = data.read_bytes_at(0, 4).unwrap_or(&[]);
    if magic != b"\x7fELF" {
        return Err(ElfError::NotElf);
    }
    let bad = |e: object::Error| ElfError::Malformed(e.to_string());
    match FileKind::parse(data).map_err(bad)? {
        FileKind::Elf32 => parse::<elf::FileHeader32<Endianness>, _>(data),
        FileKind::Elf64 => parse::<elf::FileHeader64<Endianness>, _>(data),
        other => Err(ElfError::Malformed(format!(
            "unexpected file kind {other:?}"
        ))),
    }
}

fn parse<'data, Elf, R>(data: R) -> Result<ElfInfo, ElfError>
where
    Elf: FileHeader<Endian = Endianness>,
    R: ReadRef<'data>,
{
    let bad = |e: object::Error| ElfError::Malformed(e.to_string());
    let header = Elf::parse(data).map_err(bad)?;
    let endian = header.endian().map_err(bad)?;
    let phdrs = header.program_headers(endian, data).map_err(bad)?;
    let mut info = ElfInfo {
        class64: header.is_class_64(),
        machine: header.e_machine(endian),
        ..ElfInfo::default()
    };
    let mut dynamic = None;
    for ph in phdrs {
        if let Some(interp) = ph.interpreter(endian, data).map_err(bad)? {
            info.interp = Some(interp.to_vec());
        }
        if let Some(d) = ph.dynamic(endian, data).map_err(bad)? {
            dynamic = Some(d);
        }
    }
    let Some(dynamic) = dynamic else {
        return Ok(info); // statically linked
    };
    let val = |d: &Elf::Dyn| -> u64 { d.d_val(endian).into() };
    let tag = |d: &Elf::Dyn| -> u64 { d.d_tag(endian).into() };
    let mut strtab = None;
    let mut strsz = None;
    for d in dynamic {
        match tag(d) as u32 {
            elf::DT_NULL => break,
            elf::DT_STRTAB => strtab = Some(val(d)),
            elf::DT_STRSZ => strsz = Some(val(d)),
            _ => {}
        }
    }
    let (Some(strtab), Some(strsz)) = (strtab, strsz) else {
        return Err(ElfError::Malformed(
            "the dynamic segment has no string table".into(),
        ));
    };
    // DT_STRTAB is an address: find the loaded segment holding it.
    let offset = phdrs
        .iter()
        .filter(|ph| ph.p_type(endian) == elf::PT_LOAD)
        .find_map(|ph| {
            let vaddr: u64 = ph.p_vaddr(endian).into();
            let filesz: u64 = ph.p_filesz(endian).into();
            let off: u64 = ph.p_offset(endian).into();
            (vaddr <= strtab && strtab < vaddr + filesz).then(|| strtab - vaddr + off)
        })
        .ok_or_else(|| {
            ElfError::Malformed(format!(
                "the string table address {strtab:#x} is in no loaded segment"
            ))
        })?;
    let string = |v: u64| -> Result<Vec<u8>, ElfError> {
        if v >= strsz {
            return Err(ElfError::Malformed(format!(
                "string offset {v} is past the string table ({strsz} bytes)"
            )));
        }
        data.read_bytes_at_until(offset + v..offset + strsz, 0)
            .map(<[u8]>::to_vec)
            .map_err(|()| ElfError::Malformed("unterminated dynamic string".into()))
    };
    let mut rpath = None;
    for d in dynamic {
        match tag(d) as u32 {
            elf::DT_NULL => break,
            elf::DT_NEEDED => info.needed.push(string(val(d))?),
            elf::DT_RPATH => rpath = Some(string(val(d))?),
            elf::DT_RUNPATH => info.runpath = Some(string(val(d))?),
            elf::DT_SONAME => info.soname = Some(string(val(d))?),
            elf::DT_FLAGS_1 => info.nodeflib = val(d) & u64::from(elf::DF_1_NODEFLIB) != 0,
            _ => {}
        }
    }
    // "If both RUNPATH and RPATH are given, the latter is ignored" (glibc).
    if info.runpath.is_none() {
        info.rpath = rpath;
    }
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_real_program_and_refuses_garbage() {
        let ls = std::fs::canonicalize("/bin/ls").expect("/bin/ls exists");
        let info = read(&ls).expect("ls is ELF");
        assert!(info.interp.is_some(), "ls is dynamically linked");
        assert!(info.needed.iter().any(|n| n.starts_with(b"libc.so")));
        let tmp = tempfile::tempdir().expect("tmp");
        let text = tmp.path().join("text");
        std::fs::write(&text, b"hello").expect("write");
        assert!(matches!(read(&text), Err(ElfError::NotElf)));
        let cut = tmp.path().join("cut");
        let bytes = std::fs::read(&ls).expect("read ls");
        std::fs::write(&cut, &bytes[..100]).expect("write");
        assert!(
            matches!(read(&cut), Err(ElfError::Malformed(_))),
            "truncated"
        );
    }
}
