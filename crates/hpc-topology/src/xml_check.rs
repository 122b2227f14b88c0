//! What hwloc's check of a loaded topology asserts about the tree's cpusets,
//! checked on an XML file's text before hwloc loads it: hwlocality runs that
//! check (`hwloc_topology_check`) in every debug build, an application's
//! included, and a failed assertion aborts the process rather than returning
//! an error. An object's cpuset is exactly the union of its children's, and
//! siblings share no CPU, in every topology hwloc writes; a hand-edited file
//! where that does not hold is refused here by name. (hwloc 2.9 repairs some
//! such files as it loads, a machine's set smaller than its children's, and
//! aborts on others, a package's set with a CPU no child has, two PUs of one
//! CPU; the file is refused either way: it is not a topology hwloc wrote.)
//! What hwloc repairs or refuses itself is left to it (a NUMA node's cpuset,
//! children out of order, the allowed set, a child's set beyond its parent's
//! under an object whose own set is its children's). Beside the sets: a PU
//! holds no object but memory, I/O and Misc, an object's cpuset is within its
//! `complete_cpuset`, and no two objects share a `gp_index`.

/// An hwloc bitmap as its text gives it: 32-bit words, least significant
/// first, trailing zero words dropped, and whether it starts with `0xf...f`
/// (every bit beyond the words set).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Bits {
    words: Vec<u32>,
    infinite: bool,
}

impl Bits {
    /// `None` for a text that is not a bitmap (hwloc says what is wrong).
    fn parse(text: &str) -> Option<Bits> {
        let mut text = text.trim();
        let mut infinite = false;
        if let Some(rest) = text.strip_prefix("0xf...f") {
            infinite = true;
            text = rest.trim_start_matches(',');
        }
        let mut words = Vec::new();
        if !text.is_empty() {
            for word in text.split(',').rev() {
                // An empty word is a zero one (hwloc 1.x writes `0xff,,,0xff`).
                let word = word.trim();
                if word.is_empty() {
                    words.push(0);
                    continue;
                }
                let hex = word.strip_prefix("0x")?;
                words.push(u32::from_str_radix(hex, 16).ok()?);
            }
        }
        let mut bits = Bits { words, infinite };
        bits.normalize();
        Some(bits)
    }

    /// One text for one set: no trailing words the infinite part (or
    /// nothing) already says.
    fn normalize(&mut self) {
        let beyond = if self.infinite { u32::MAX } else { 0 };
        while self.words.last() == Some(&beyond) {
            self.words.pop();
        }
    }

    fn word(&self, k: usize) -> u32 {
        match self.words.get(k) {
            Some(&w) => w,
            None if self.infinite => u32::MAX,
            None => 0,
        }
    }

    /// In the time of the shorter set (the longer's words beyond it meet
    /// nothing but an infinite part).
    fn intersects(&self, other: &Bits) -> bool {
        let n = match (self.infinite, other.infinite) {
            (true, true) => return true,
            (true, false) => other.words.len(),
            (false, true) => self.words.len(),
            (false, false) => self.words.len().min(other.words.len()),
        };
        (0..n).any(|k| self.word(k) & other.word(k) != 0)
    }

    /// Whether every bit of `self` is in `other`.
    fn included_in(&self, other: &Bits) -> bool {
        if self.infinite && !other.infinite {
            return false;
        }
        let n = self.words.len().max(other.words.len());
        (0..n).all(|k| self.word(k) & !other.word(k) == 0)
    }

    /// In place, in the time of `other` (a parent's union grows by each
    /// child without being copied: a large first child and many small ones
    /// stay linear).
    fn or(&mut self, other: &Bits) {
        if other.infinite {
            // Beyond other's words, every bit is set.
            self.words.truncate(other.words.len());
        }
        let n = if self.infinite {
            self.words.len().min(other.words.len())
        } else {
            other.words.len()
        };
        for k in 0..n {
            let w = other.word(k);
            match self.words.get_mut(k) {
                Some(mine) => *mine |= w,
                None => self.words.push(w),
            }
        }
        self.infinite |= other.infinite;
        self.normalize();
    }
}

/// An object of the tree being read, until its end tag.
struct Open {
    index: usize,
    kind: String,
    cpuset: Option<Bits>,
    /// The union of the children that count ([`counts`]).
    children: Bits,
    /// Whether a child that counts was met.
    any_child: bool,
}

/// Objects whose cpuset is no part of their parent's partition: memory (a NUMA
/// node or a memory-side cache, unless it holds objects, as in hwloc 1.x's
/// files), I/O and Misc objects.
fn special(kind: &str) -> bool {
    matches!(
        kind,
        "NUMANode" | "MemCache" | "Bridge" | "PCIDev" | "OSDev" | "Misc"
    )
}

/// The end of an XML start tag beginning at `tag` (after `<object`): the
/// index of its `>` outside quoted attribute values.
fn tag_end(tag: &str) -> usize {
    let mut quote = None;
    for (i, c) in tag.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), _) if c == q => quote = None,
            (None, '>') => return i,
            _ => {}
        }
    }
    tag.len()
}

/// `gp_index` as hwloc reads it (`strtoull` of base 10: blanks, a sign,
/// the leading digits; `08`, ` 8` and `8x` are 8, `-1` wraps); `None` for 0,
/// which hwloc replaces by a free index of its own (with a warning).
fn gp_index(text: &str) -> Option<u64> {
    let t = text.trim_start();
    let (negative, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    let n = if digits == 0 {
        0
    } else {
        t[..digits].parse::<u64>().unwrap_or(u64::MAX)
    };
    let n = if negative { n.wrapping_neg() } else { n };
    (n != 0).then_some(n)
}

/// Refuses a tree hwloc's check would abort on: an object (not a PU, not
/// memory, I/O or Misc) with children whose cpusets overlap, or whose union is
/// not its own cpuset; an object whose cpuset is not within its
/// `complete_cpuset`; a PU with a child that is not memory, I/O or Misc (the
/// PUs are the last level); two objects of one `gp_index`. A file whose tags
/// do not nest is left to hwloc, which refuses it.
pub(crate) fn children_partition_their_parent(text: &str) -> Result<(), String> {
    let mut stack: Vec<Open> = Vec::new();
    let mut gp_indexes = std::collections::HashMap::new();
    let mut index = 0usize;
    let mut rest = text;
    while let Some(at) = rest.find('<') {
        rest = &rest[at + 1..];
        if let Some(after) = rest.strip_prefix("/object") {
            rest = after;
            let Some(done) = stack.pop() else {
                return Ok(());
            };
            close(done, stack.last_mut())?;
            continue;
        }
        let Some(tag) = rest.strip_prefix("object") else {
            continue;
        };
        if !tag.starts_with(|c: char| c.is_ascii_whitespace() || c == '/' || c == '>') {
            continue;
        }
        let end = tag_end(tag);
        let attrs = &tag[..end];
        rest = &tag[end..];
        let kind = attr(attrs, "type").unwrap_or("?").to_string();
        let open = Open {
            index,
            cpuset: attr(attrs, "cpuset").and_then(Bits::parse),
            kind,
            children: Bits::default(),
            any_child: false,
        };
        index += 1;
        check_alone(&open, attrs, stack.last(), &mut gp_indexes)?;
        if attrs.trim_end().ends_with('/') {
            close(open, stack.last_mut())?;
        } else {
            stack.push(open);
        }
    }
    Ok(())
}

/// What hwloc's check asserts of one object, seen at its start tag (each
/// aborted a debug build: "Assertion `hwloc_bitmap_isincluded(obj->cpuset,
/// obj->complete_cpuset)' failed", "… `hwloc_get_depth_type(topology, j) !=
/// HWLOC_OBJ_PU' …", "… `!hwloc_bitmap_isset(gp_indexes, obj->gp_index)' …").
fn check_alone(
    open: &Open,
    attrs: &str,
    parent: Option<&Open>,
    gp_indexes: &mut std::collections::HashMap<u64, usize>,
) -> Result<(), String> {
    const AGAIN: &str = "(hwloc's check of a loaded topology asserts it, aborting a \
                         debug build); export the topology with lstopo again";
    let kind = hpc_env::short(&open.kind);
    if let (Some(set), Some(complete)) = (
        &open.cpuset,
        attr(attrs, "complete_cpuset").and_then(Bits::parse),
    ) {
        if !set.included_in(&complete) {
            return Err(format!(
                "object {} (type {kind}) has cpuset {} beyond its complete_cpuset {}: an \
                 object's CPUs are among its complete set {AGAIN}",
                open.index,
                shown(set),
                shown(&complete)
            ));
        }
    }
    if let Some(parent) = parent.filter(|p| p.kind == "PU" && !special(&open.kind)) {
        return Err(format!(
            "object {} (type {kind}) is a child of object {} (type PU): a PU holds no \
             object but memory, I/O and Misc, the PUs are the last level {AGAIN}",
            open.index, parent.index
        ));
    }
    if let Some(gp) = attr(attrs, "gp_index").and_then(gp_index) {
        if let Some(first) = gp_indexes.insert(gp, open.index) {
            return Err(format!(
                "object {} (type {kind}) has gp_index {gp}, as object {first} has: each \
                 object has a gp_index of its own {AGAIN}",
                open.index
            ));
        }
    }
    Ok(())
}

/// Checks `done`'s children, then adds it to its parent's union where it
/// counts.
fn close(done: Open, parent: Option<&mut Open>) -> Result<(), String> {
    let memory = matches!(done.kind.as_str(), "NUMANode" | "MemCache");
    if let Some(set) = &done.cpuset {
        if done.kind != "PU" && !special(&done.kind) && done.children != *set {
            return Err(format!(
                "object {} (type {}) has cpuset {} but its children's cpusets make {}: \
                 an object holds exactly its children's CPUs (hwloc's check of a loaded \
                 topology asserts it, aborting a debug build); export the topology with \
                 lstopo again",
                done.index,
                hpc_env::short(&done.kind),
                shown(set),
                shown(&done.children)
            ));
        }
    }
    let counts = !special(&done.kind) || (memory && done.any_child);
    if let (Some(parent), Some(set), true) = (parent, &done.cpuset, counts) {
        if parent.children.intersects(set) {
            return Err(format!(
                "object {} (type {}) has cpuset {}, which overlaps an earlier sibling's \
                 under object {} (type {}): siblings share no CPU (hwloc's check of a \
                 loaded topology asserts it, aborting a debug build); export the topology \
                 with lstopo again",
                done.index,
                hpc_env::short(&done.kind),
                shown(set),
                parent.index,
                hpc_env::short(&parent.kind)
            ));
        }
        parent.children.or(set);
        parent.any_child = true;
    }
    Ok(())
}

/// A set as hwloc writes it, cut when long.
fn shown(bits: &Bits) -> String {
    let mut text = if bits.infinite {
        "0xf...f".to_string()
    } else {
        String::new()
    };
    let words: Vec<String> = bits
        .words
        .iter()
        .rev()
        .map(|w| format!("0x{w:08x}"))
        .collect();
    if words.is_empty() && !bits.infinite {
        return "0x0".to_string();
    }
    for w in words {
        if !text.is_empty() {
            text.push(',');
        }
        text.push_str(&w);
    }
    hpc_env::short(&text)
}

/// The value of the attribute `name` among an XML start tag's `attrs`,
/// if it is there (quoted with `"`).
pub(crate) fn attr<'a>(attrs: &'a str, name: &str) -> Option<&'a str> {
    attrs.match_indices(name).find_map(|(i, _)| {
        if !attrs[..i].ends_with(|c: char| c.is_ascii_whitespace()) {
            return None;
        }
        let value = attrs[i + name.len()..].trim_start().strip_prefix('=')?;
        let value = value.trim_start().strip_prefix('"')?;
        value.split_once('"').map(|(v, _)| v)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitmaps_are_read_as_hwloc_writes_them() {
        let b = Bits::parse("0x00000001,0x00000000").unwrap();
        assert_eq!(b.words, vec![0, 1]);
        assert!(Bits::parse("0xf...f,0x1").unwrap().infinite);
        assert_eq!(Bits::parse("0x0").unwrap(), Bits::default());
        assert!(Bits::parse("zz").is_none());
        assert_eq!(Bits::parse("0x1,,0x2").unwrap().words, vec![2, 0, 1]);
        let mut u = Bits::parse("0x1").unwrap();
        u.or(&Bits::parse("0x2,0x0").unwrap());
        assert_eq!(shown(&u), "0x00000002,0x00000001");
        assert!(u.intersects(&Bits::parse("0x00000001").unwrap()));
        assert!(!u.intersects(&Bits::parse("0x4").unwrap()));
        let mut both = Bits::parse("0xf...f,0x0,0x0").unwrap();
        both.or(&Bits::parse("0xf...f,0x4").unwrap());
        assert_eq!(shown(&both), "0xf...f,0x00000004");
        let mut inf = Bits::parse("0xf...f,0x1").unwrap();
        assert_eq!(inf, Bits::parse("0xf...f,0xffffffff,0x00000001").unwrap());
        assert!(inf.intersects(&Bits::parse("0x1,0x0,0x0").unwrap()));
        assert!(!inf.intersects(&Bits::parse("0x2").unwrap()));
        inf.or(&Bits::parse("0x2").unwrap());
        assert_eq!(shown(&inf), "0xf...f,0x00000003");
        u.or(&Bits::parse("0xf...f,0x0,0x0,0x0").unwrap());
        assert_eq!(u, Bits::parse("0xf...f,0x0,0x2,0x1").unwrap());
    }

    #[test]
    fn gp_indexes_are_read_as_hwloc_reads_them() {
        assert_eq!(gp_index("8"), Some(8));
        assert_eq!(gp_index(" 08x"), Some(8));
        assert_eq!(gp_index("+8"), Some(8));
        assert_eq!(gp_index("-1"), Some(u64::MAX));
        assert_eq!(gp_index("x"), None);
        assert_eq!(gp_index("0"), None);
        assert_eq!(gp_index("99999999999999999999999"), Some(u64::MAX));
        let a = Bits::parse("0x1").unwrap();
        assert!(a.included_in(&Bits::parse("0x3").unwrap()));
        assert!(!Bits::parse("0x3").unwrap().included_in(&a));
        assert!(!Bits::parse("0xf...f").unwrap().included_in(&a));
        assert!(a.included_in(&Bits::parse("0xf...f").unwrap()));
        assert!(!Bits::parse("0x1,0x0").unwrap().included_in(&a));
    }

    #[test]
    fn a_tag_ends_at_its_first_unquoted_angle() {
        assert_eq!(tag_end(r#" name="a>b"/>x"#), 12);
        assert_eq!(tag_end(" x"), 2);
    }
}
