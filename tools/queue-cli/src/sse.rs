//! The one `text/event-stream` parser of queue-cli (the HTML standard's "Server-sent
//! events", "Event stream interpretation"), fed bytes as they arrive, by the journey's
//! stream ([`crate::api`]) and by the push-scale streams over plain TCP
//! ([`crate::push_scale`]).
//!
//! Lines end in CRLF, LF or a lone CR (also when a chunk of bytes ends between the CR
//! and its LF); a blank line dispatches the event; `:` starts a comment (keep-alives);
//! `event:` names the event (default `message`); `data:` lines are joined with "\n";
//! `id:` sets the last event id, which every later event carries; a field without a
//! colon is a name with an empty value; one space after the colon is dropped; unknown
//! fields (`retry:` too: nothing here reconnects by itself) are ignored, and an event
//! without data is not dispatched. An event cut off by the end of the stream is lost.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// `event:`, or `message` when the event named none.
    pub name: String,
    /// The `data:` lines, joined with "\n".
    pub data: String,
    /// The last event id set so far in the stream (`id:`), if any.
    pub id: Option<String>,
}

/// An event stream being read.
#[derive(Debug, Default)]
pub struct Parser {
    /// The line not yet ended.
    line: Vec<u8>,
    /// The last line ended in CR: an LF right after it belongs to it.
    after_cr: bool,
    /// The first bytes were seen (a byte order mark is dropped only there).
    started: bool,
    name: String,
    data: String,
    has_data: bool,
    last_id: Option<String>,
}

const BOM: &[u8] = "\u{feff}".as_bytes();

impl Parser {
    /// Takes the next bytes of the stream; the events they complete, in order.
    pub fn push(&mut self, mut bytes: &[u8]) -> Vec<Event> {
        let out = Vec::new();
        if !self.started && !bytes.is_empty() {
            // The mark may be split over pushes: wait for its three bytes.
            let pending = [self.line.as_slice(), bytes].concat();
            if pending.len() < BOM.len() && BOM.starts_with(&pending) {
                self.line = pending;
                return out;
            }
            self.started = true;
            self.line.clear();
            let rest = pending.strip_prefix(BOM).unwrap_or(&pending);
            return self.lines(rest, out);
        }
        if self.after_cr && !bytes.is_empty() {
            self.after_cr = false;
            if bytes[0] == b'\n' {
                bytes = &bytes[1..];
            }
        }
        self.lines(bytes, out)
    }

    fn lines(&mut self, mut bytes: &[u8], mut out: Vec<Event>) -> Vec<Event> {
        while let Some(end) = bytes.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.line.extend_from_slice(&bytes[..end]);
            let cr = bytes[end] == b'\r';
            bytes = &bytes[end + 1..];
            if cr {
                match bytes.first() {
                    Some(b'\n') => bytes = &bytes[1..],
                    None => self.after_cr = true,
                    Some(_) => {}
                }
            }
            let line = std::mem::take(&mut self.line);
            if let Some(ev) = self.end_line(&line) {
                out.push(ev);
            }
            // Keep the allocation for the next line.
            self.line = line;
            self.line.clear();
        }
        self.line.extend_from_slice(bytes);
        out
    }

    /// One whole line (without its ending): the event it dispatches, if any.
    fn end_line(&mut self, line: &[u8]) -> Option<Event> {
        if line.is_empty() {
            let name = std::mem::take(&mut self.name);
            if !std::mem::take(&mut self.has_data) {
                return None;
            }
            let name = if name.is_empty() { "message".to_string() } else { name };
            return Some(Event { name, data: std::mem::take(&mut self.data), id: self.last_id.clone() });
        }
        if line[0] == b':' {
            return None;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        let value = String::from_utf8_lossy(value);
        match field {
            b"event" => self.name = value.into_owned(),
            b"data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(&value);
                self.has_data = true;
            }
            b"id" if !value.contains('\0') => self.last_id = Some(value.into_owned()),
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(name: &str, data: &str) -> Event {
        Event { name: name.into(), data: data.into(), id: None }
    }

    /// Every split of `stream` into two pushes gives the same events.
    fn parse_split_anywhere(stream: &[u8]) -> Vec<Event> {
        let whole = Parser::default().push(stream);
        for at in 0..=stream.len() {
            let mut p = Parser::default();
            let mut got = p.push(&stream[..at]);
            got.extend(p.push(&stream[at..]));
            assert_eq!(got, whole, "split at {at}");
        }
        let mut p = Parser::default();
        let bytewise: Vec<Event> = stream.iter().flat_map(|b| p.push(std::slice::from_ref(b))).collect();
        assert_eq!(bytewise, whole, "byte by byte");
        whole
    }

    #[test]
    fn events_split_across_chunks_and_comments_skipped() {
        let mut p = Parser::default();
        assert!(p.push(b": keep-alive\n\nevent: posi").is_empty());
        let got = p.push(b"tion\ndata: {\"a\":1}\n\nevent: promoted\r\ndata: x\r\ndata: y\r\n\r\n");
        assert_eq!(got, vec![ev("position", "{\"a\":1}"), ev("promoted", "x\ny")]);
        assert!(p.push(b"data: tail").is_empty());
        assert_eq!(p.push(b"\n\n"), vec![ev("message", "tail")]);
    }

    /// An overwriting parser (the last `data:` line wins) gives "three" here.
    #[test]
    fn data_lines_are_joined_with_newlines() {
        let got = parse_split_anywhere(b"data: one\ndata: two\ndata:three\n\n");
        assert_eq!(got, vec![ev("message", "one\ntwo\nthree")]);
        // Empty data lines count: leading, inner and trailing newlines are kept.
        let got = parse_split_anywhere(b"data\ndata: a\ndata:\n\ndata:\n\n");
        assert_eq!(got, vec![ev("message", "\na\n"), ev("message", "")]);
    }

    #[test]
    fn every_line_ending_is_one() {
        for stream in [
            &b"event: e\ndata: d1\ndata: d2\n\n"[..],
            b"event: e\r\ndata: d1\r\ndata: d2\r\n\r\n",
            b"event: e\rdata: d1\rdata: d2\r\r",
            b"event: e\r\ndata: d1\rdata: d2\n\r\n",
        ] {
            assert_eq!(parse_split_anywhere(stream), vec![ev("e", "d1\nd2")], "{stream:?}");
        }
    }

    #[test]
    fn comments_names_and_ids() {
        let stream = b":hello\nevent: position\nid: 7\ndata: a\n\n: ping\n\ndata: b\n\nid\nevent: x\ndata: c\n\n";
        let got = parse_split_anywhere(stream);
        assert_eq!(
            got,
            vec![
                Event { name: "position".into(), data: "a".into(), id: Some("7".into()) },
                // The id stays; the name does not.
                Event { name: "message".into(), data: "b".into(), id: Some("7".into()) },
                // `id` without a colon: the empty id.
                Event { name: "x".into(), data: "c".into(), id: Some(String::new()) },
            ]
        );
        // An id with NUL is ignored.
        assert_eq!(parse_split_anywhere(b"id: a\0b\ndata: d\n\n")[0].id, None);
    }

    #[test]
    fn only_one_space_goes_and_unknown_fields_are_skipped() {
        let got = parse_split_anywhere(b"data:  two spaces\nretry: 10\nfoo: bar\n1a\n\n");
        assert_eq!(got, vec![ev("message", " two spaces")]);
    }

    #[test]
    fn an_event_without_data_is_not_dispatched_and_its_name_is_forgotten() {
        assert_eq!(parse_split_anywhere(b"event: lonely\n\ndata: d\n\n"), vec![ev("message", "d")]);
        // The end of the stream loses an unfinished event.
        assert!(parse_split_anywhere(b"data: cut off\n").is_empty());
    }

    #[test]
    fn a_leading_byte_order_mark_is_dropped() {
        let got = parse_split_anywhere("\u{feff}data: x\n\n".as_bytes());
        assert_eq!(got, vec![ev("message", "x")]);
    }
}
