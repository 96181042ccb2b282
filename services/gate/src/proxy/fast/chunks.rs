//! Where a chunked body ends, read as it passes to the client (RFC 9112 7.1): each
//! size line read by `httparse::parse_chunk_size` (hex digits, overflow, extensions),
//! the chunks' data skipped, the trailer's lines skipped up to the empty one.
//!
//! Checked beyond what httparse checks, so that the gate reads a body as strictly as
//! hyper (the general path's codec) and the client do: the size has a digit
//! (httparse takes an empty size, `\r\n` or `;x\r\n`, for 0), nothing but `;` or CR
//! follows the digits (httparse takes `5 \r\n`), an extension holds no control
//! character (httparse takes any byte there), and a size line split between reads
//! is kept at most [`MAX_SIZE_LINE`] long.

/// The longest size line (size and extensions) kept while its end has not come
/// (hyper allows a body's extensions 16 KiB in all).
const MAX_SIZE_LINE: usize = 16 * 1024;

/// A chunked body's end, found as its bytes pass.
#[derive(Debug, Default)]
pub(super) struct Chunks {
    state: State,
    /// A size line begun in bytes already passed, whose end has not come.
    line: Vec<u8>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum State {
    /// A size line.
    #[default]
    Size,
    /// Bytes of data left in the chunk.
    Data(u64),
    DataCr,
    DataLf,
    /// After the last chunk: a trailer line or the empty line that ends the body.
    TrailerStart,
    Trailer,
    TrailerLf,
    EndLf,
}

impl Chunks {
    /// Reads `bytes` on; Some(n) when the body ends after the first n of them.
    pub(super) fn feed(&mut self, bytes: &[u8]) -> Result<Option<usize>, ()> {
        use State::*;
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            match self.state {
                Size => {
                    let rest = &bytes[i..];
                    let Some(lf) = memchr::memchr(b'\n', rest) else {
                        self.line.extend_from_slice(rest);
                        if self.line.len() > MAX_SIZE_LINE {
                            return Err(());
                        }
                        return Ok(None);
                    };
                    let size = if self.line.is_empty() {
                        chunk_size(&rest[..=lf])?
                    } else {
                        self.line.extend_from_slice(&rest[..=lf]);
                        let size = chunk_size(&self.line)?;
                        self.line = Vec::new();
                        size
                    };
                    i += lf + 1;
                    self.state = if size == 0 { TrailerStart } else { Data(size) };
                    continue;
                }
                Data(left) => {
                    let n = left.min((bytes.len() - i) as u64);
                    i += n as usize;
                    self.state = if n == left { DataCr } else { Data(left - n) };
                    continue;
                }
                DataCr => self.state = if b == b'\r' { DataLf } else { return Err(()) },
                DataLf => self.state = if b == b'\n' { Size } else { return Err(()) },
                TrailerStart => {
                    self.state = match b {
                        b'\r' => EndLf,
                        b'\n' => return Err(()),
                        _ => Trailer,
                    }
                }
                Trailer => match b {
                    b'\r' => self.state = TrailerLf,
                    b'\n' => return Err(()),
                    _ => {}
                },
                TrailerLf => self.state = if b == b'\n' { TrailerStart } else { return Err(()) },
                EndLf => return if b == b'\n' { Ok(Some(i + 1)) } else { Err(()) },
            }
            i += 1;
        }
        Ok(None)
    }
}

/// The size of a whole size line (`line` ends with its LF).
fn chunk_size(line: &[u8]) -> Result<u64, ()> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    let extension = match line.get(digits) {
        _ if digits == 0 => return Err(()),
        Some(b';') => &line[digits..line.len().saturating_sub(2)],
        Some(b'\r') => &[][..],
        _ => return Err(()),
    };
    if extension.iter().any(|&b| (b < 32 && b != b'\t') || b == 127) {
        return Err(());
    }
    // httparse counts leading zeros among its 16 digits at most; hyper (and the
    // client) take any number of them: they are skipped here, one digit kept.
    let zeros = line[..digits - 1].iter().take_while(|&&b| b == b'0').count();
    let line = &line[zeros..];
    match httparse::parse_chunk_size(line) {
        Ok(httparse::Status::Complete((used, size))) if used == line.len() => Ok(size),
        _ => Err(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ends(parts: &[&[u8]]) -> Result<Option<usize>, ()> {
        let mut c = Chunks::default();
        let mut seen = 0;
        for p in parts {
            if let Some(n) = c.feed(p)? {
                return Ok(Some(seen + n));
            }
            seen += p.len();
        }
        Ok(None)
    }

    #[test]
    fn chunked_bodies_end_where_they_end() {
        let body: &[u8] = b"5\r\nhello\r\n1A;ext=1\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\n\r\nGET / HTTP/1.1";
        let end = body.len() - b"GET / HTTP/1.1".len();
        assert_eq!(ends(&[body]), Ok(Some(end)));
        // Cut anywhere, the end is found at the same place.
        for cut in 1..end {
            assert_eq!(ends(&[&body[..cut], &body[cut..]]), Ok(Some(end)), "cut at {cut}");
        }
        assert_eq!(ends(&[b"0\r\nx-trailer: 1\r\n\r\n"]), Ok(Some(19)));
        assert_eq!(ends(&[b"5\r\nhel"]), Ok(None));
        for bad in [
            &b"5\r\nhelloX\r\n"[..],
            b"g\r\n",
            b"5\nhello",
            b"ffffffffffffffffff\r\n",
            b"\r\n",
            b";x\r\n",
            b"5 \r\nhello\r\n",
            b"0\r\nx-trailer: 1\n\r\n",
            b"0\r\n\n",
        ] {
            assert_eq!(ends(&[bad]), Err(()), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn size_lines_read_as_hyper_reads_them() {
        // Leading zeros, however many (hyper takes them; httparse alone counts them
        // among its 16 digits).
        assert_eq!(chunk_size(b"00000000000000005\r\n"), Ok(5));
        assert_eq!(chunk_size(b"0000000000000000000000000000000\r\n"), Ok(0));
        assert_eq!(chunk_size(b"000000000000000000a;x=y\r\n"), Ok(10));
        let zeros: &[u8] = b"00000000000000005\r\nhello\r\n0000000000000000000\r\n\r\n";
        assert_eq!(ends(&[zeros]), Ok(Some(zeros.len())));
        // The largest size there is, with or without zeros before it; one past it is refused.
        assert_eq!(chunk_size(b"ffffffffffffffff\r\n"), Ok(u64::MAX));
        assert_eq!(chunk_size(b"0000ffffffffffffffff\r\n"), Ok(u64::MAX));
        assert_eq!(chunk_size(b"10000000000000000\r\n"), Err(()));
        assert_eq!(chunk_size(b"0010000000000000000\r\n"), Err(()));
        for bad in [
            &b"5;a\n"[..],   // a bare LF after an extension
            b"5;\x01\r\n",   // a control byte in an extension
            b"5;a=\x7f\r\n", // DEL too
            b"0x5\r\n",      // no 0x prefix
            b"00x5\r\n",
            b"5\r\r\n", // a CR not followed by LF
        ] {
            assert_eq!(chunk_size(bad), Err(()), "{:?}", String::from_utf8_lossy(bad));
            assert_eq!(ends(&[bad]), Err(()), "{:?}", String::from_utf8_lossy(bad));
        }
        // A TAB in an extension is allowed, as hyper allows it.
        assert_eq!(chunk_size(b"5;a=\tb\r\n"), Ok(5));
    }

    #[test]
    fn a_size_line_split_between_reads_is_bounded() {
        // Its end not come yet: kept, up to MAX_SIZE_LINE.
        let mut c = Chunks::default();
        assert_eq!(c.feed(b"5;"), Ok(None));
        let ext = vec![b'a'; MAX_SIZE_LINE / 2];
        assert_eq!(c.feed(&ext), Ok(None));
        assert_eq!(c.feed(&ext), Err(()), "grown past the longest size line");
        // One just below the limit, split, still ends where it ends.
        let mut c = Chunks::default();
        let line = [&b"5;"[..], &vec![b'a'; MAX_SIZE_LINE - 4], b"\r\n"].concat();
        let (first, rest) = line.split_at(100);
        assert_eq!(c.feed(first), Ok(None));
        assert_eq!(c.feed(&[rest, b"hello\r\n0\r\n\r\n"].concat()), Ok(Some(rest.len() + 12)));
    }
}
