//! [`Words`]: the keys or the arguments of one script call, in one buffer.

use core::fmt;
use core::ops::Index;

/// The keys or the arguments of one script call: a list of strings kept in one buffer.
///
/// Every request the engine sends builds one of each, so a list costs two allocations
/// however many words it has (a `Vec<String>` costs one per word), and a transport reads the
/// words in order with [`Words::iter`]. It compares, prints and indexes as the list of its
/// words.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Words {
    /// Every word, one after another.
    text: String,
    /// Where each word ends in `text`: a script call's words are far below 4 GiB, and a
    /// `u32` is what the WIT's `words` record carries, so the list crosses whole.
    ends: Vec<u32>,
}

impl Words {
    pub const fn new() -> Self {
        Self {
            text: String::new(),
            ends: Vec::new(),
        }
    }

    /// An empty list with room for `words` words of `bytes` bytes in all.
    pub fn with_capacity(words: usize, bytes: usize) -> Self {
        Self {
            text: String::with_capacity(bytes),
            ends: Vec::with_capacity(words),
        }
    }

    /// Appends `word`.
    pub fn push(&mut self, word: &str) {
        self.push_joined(&[word]);
    }

    /// Appends one word: `parts`, joined.
    pub fn push_joined(&mut self, parts: &[&str]) {
        for part in parts {
            self.text.push_str(part);
        }
        let end = u32::try_from(self.text.len()).expect("a script call's words stay below 4 GiB");
        self.ends.push(end);
    }

    /// Appends `n` in decimal.
    pub fn push_number(&mut self, n: u64) {
        // Not through `to_string`: the formatting machinery costs more than the rest of a
        // request's words.
        let mut scratch = [0u8; 20];
        let digits = crate::owner::digits::<10>(n, &mut scratch);
        self.push(core::str::from_utf8(digits).expect("decimal digits are ASCII"));
    }

    /// The number of words.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The length of all words together, in bytes.
    pub fn byte_len(&self) -> usize {
        self.text.len()
    }

    /// Word `i`, if there are more than `i`.
    pub fn get(&self, i: usize) -> Option<&str> {
        let end = *self.ends.get(i)? as usize;
        let start = i
            .checked_sub(1)
            .map_or(0, |before| self.ends[before] as usize);
        Some(&self.text[start..end])
    }

    pub fn first(&self) -> Option<&str> {
        self.get(0)
    }

    pub fn last(&self) -> Option<&str> {
        self.len().checked_sub(1).and_then(|i| self.get(i))
    }

    /// The words, in order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            rest: &self.text,
            start: 0,
            ends: self.ends.iter(),
        }
    }

    /// The words as strings of their own.
    pub fn to_vec(&self) -> Vec<String> {
        self.iter().map(str::to_owned).collect()
    }

    /// The words one after another, and where each ends: what the WIT's `words` record
    /// carries.
    pub fn into_parts(self) -> (String, Vec<u32>) {
        (self.text, self.ends)
    }

    /// The list [`Words::into_parts`] gave, or `None` when `ends` does not split `text` into
    /// words: an end before the one before it, one inside a character, or a last end that is
    /// not the end of `text`.
    pub fn from_parts(text: String, ends: Vec<u32>) -> Option<Self> {
        Self::splits(&text, &ends).then_some(Self { text, ends })
    }

    /// Whether `ends` splits `text` into words, as [`Words::from_parts`] requires.
    pub fn splits(text: &str, ends: &[u32]) -> bool {
        let mut start = 0;
        for &end in ends {
            let end = end as usize;
            if end < start || !text.is_char_boundary(end) {
                return false;
            }
            start = end;
        }
        start == text.len()
    }
}

/// The words of a [`Words`], in order.
#[derive(Clone, Debug)]
pub struct Iter<'a> {
    /// The words not read yet, one after another.
    rest: &'a str,
    /// Where `rest` starts in the list's text.
    start: usize,
    ends: core::slice::Iter<'a, u32>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let end = *self.ends.next()? as usize;
        let (word, rest) = self.rest.split_at(end - self.start);
        (self.rest, self.start) = (rest, end);
        Some(word)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.ends.size_hint()
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a Words {
    type Item = &'a str;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl Index<usize> for Words {
    type Output = str;

    fn index(&self, i: usize) -> &str {
        self.get(i)
            .unwrap_or_else(|| panic!("word {i} of a list of {}", self.len()))
    }
}

impl fmt::Debug for Words {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<S: AsRef<str>> FromIterator<S> for Words {
    fn from_iter<I: IntoIterator<Item = S>>(words: I) -> Self {
        let mut list = Words::new();
        for word in words {
            list.push(word.as_ref());
        }
        list
    }
}

impl<S: AsRef<str>> From<&[S]> for Words {
    fn from(words: &[S]) -> Self {
        let bytes = words.iter().map(|w| w.as_ref().len()).sum();
        let mut list = Words::with_capacity(words.len(), bytes);
        for word in words {
            list.push(word.as_ref());
        }
        list
    }
}

impl<S: AsRef<str>, const N: usize> From<[S; N]> for Words {
    fn from(words: [S; N]) -> Self {
        Words::from(&words[..])
    }
}

impl From<Words> for Vec<String> {
    fn from(words: Words) -> Self {
        words.to_vec()
    }
}

impl<S: AsRef<str>> PartialEq<[S]> for Words {
    fn eq(&self, other: &[S]) -> bool {
        self.len() == other.len() && self.iter().zip(other).all(|(a, b)| a == b.as_ref())
    }
}

impl<S: AsRef<str>, const N: usize> PartialEq<[S; N]> for Words {
    fn eq(&self, other: &[S; N]) -> bool {
        *self == other[..]
    }
}

impl<S: AsRef<str>> PartialEq<Vec<S>> for Words {
    fn eq(&self, other: &Vec<S>) -> bool {
        *self == other[..]
    }
}

#[cfg(test)]
mod tests {
    use super::Words;

    #[test]
    fn words_keep_their_order_and_bounds() {
        let mut words = Words::with_capacity(4, 8);
        words.push("dlock:{a}:lock");
        words.push("");
        words.push_joined(&["dlock:{", "a", "}:", "fence"]);
        words.push_number(0);
        words.push_number(u64::MAX);
        assert_eq!(
            words,
            [
                "dlock:{a}:lock",
                "",
                "dlock:{a}:fence",
                "0",
                "18446744073709551615"
            ]
        );
        assert_eq!(words.len(), 5);
        assert_eq!(words.byte_len(), 14 + 15 + 1 + 20);
        assert_eq!(&words[2], "dlock:{a}:fence");
        assert_eq!(words.get(1), Some(""));
        assert_eq!(words.get(5), None);
        assert_eq!(words.first(), Some("dlock:{a}:lock"));
        assert_eq!(words.last(), Some("18446744073709551615"));
        assert_eq!(words.iter().len(), 5);
        assert_eq!(
            format!("{words:?}"),
            r#"["dlock:{a}:lock", "", "dlock:{a}:fence", "0", "18446744073709551615"]"#
        );
        assert_eq!(Words::from(&words.to_vec()[..]), words);
        let (text, ends) = words.clone().into_parts();
        assert_eq!(ends, [14, 14, 29, 30, 50]);
        assert_eq!(Words::from_parts(text.clone(), ends), Some(words.clone()));
        assert_eq!(Words::from_parts(String::new(), vec![]), Some(Words::new()));
        // Ends that do not split the text into words: falling, past the end, short of it,
        // inside a character.
        for ends in [vec![14, 13, 50], vec![14, 51], vec![14, 49], vec![]] {
            assert_eq!(
                Words::from_parts(text.clone(), ends.clone()),
                None,
                "{ends:?}"
            );
        }
        assert_eq!(Words::from_parts("é".into(), vec![1, 2]), None);
        assert_eq!(
            Words::from_parts("é".into(), vec![0, 2]),
            Some(Words::from(["", "é"]))
        );
        assert_eq!(Words::new().last(), None);
        assert!(Words::new().is_empty());
        for n in [1, 9, 10, 99, 100, 1_234_567, 10_000_000_000] {
            let mut one = Words::new();
            one.push_number(n);
            assert_eq!(one, [n.to_string()]);
        }
    }
}
