//! Secrets never leave the process in the clear: [`redact`] is the one function every
//! message, `Debug`, `Display`, `repr` and log line that may carry a URL goes through.

/// `text` with the password of every URL in it replaced by `***`:
/// `redis://app:hunter2@db:6379/0` becomes `redis://app:***@db:6379/0`. A URL is a run of
/// text between white space or quotes, with or without its `scheme://`; its credentials are
/// what comes before the last `@` in it, so a password that itself holds `@`, `/` or `:` is
/// hidden whole. A user name alone (`redis://app@db`) is not a secret and stays.
///
/// ```
/// assert_eq!(dlock::redact("zk://u:p@w@h:2181,h:2182/app"), "zk://u:***@h:2181,h:2182/app");
/// assert_eq!(dlock::redact("no URL here"), "no URL here");
/// ```
pub fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        let end = rest.find(is_boundary).unwrap_or(rest.len());
        let (word, tail) = rest.split_at(end);
        redact_word(word, &mut out);
        let boundary = tail.chars().next().map_or(0, char::len_utf8);
        out.push_str(&tail[..boundary]);
        rest = &tail[boundary..];
    }
    out
}

fn is_boundary(c: char) -> bool {
    c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>' | '(' | ')' | '[' | ']')
}

/// One word: `[scheme://]user:password@rest` loses its password.
fn redact_word(word: &str, out: &mut String) {
    let (scheme, url) = word.split_at(word.find("://").map_or(0, |i| i + 3));
    match url.rfind('@').map(|at| url.split_at(at)) {
        Some((credentials, host)) if credentials.contains(':') => {
            let user = credentials.split(':').next().unwrap_or_default();
            out.push_str(scheme);
            out.push_str(user);
            out.push_str(":***");
            out.push_str(host);
        }
        _ => out.push_str(word),
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_are_hidden_wherever_a_url_stands() {
        let cases = [
            ("redis://u:pw@h:1", "redis://u:***@h:1"),
            ("redis://:pw@h:1/0", "redis://:***@h:1/0"),
            ("rediss://u:p/w@h:1", "rediss://u:***@h:1"),
            ("redlock://u:pw@a:1,b:2", "redlock://u:***@a:1,b:2"),
            ("zk://u:p:w@h:2181/chroot", "zk://u:***@h:2181/chroot"),
            (
                "\"redis://u:pw@h:1\": Connection refused; redis://v:pw2@g:2",
                "\"redis://u:***@h:1\": Connection refused; redis://v:***@g:2",
            ),
            ("redis://user@h:1", "redis://user@h:1"),
            ("memory://demo", "memory://demo"),
            ("nothing", "nothing"),
            ("ends with ://", "ends with ://"),
            ("x://:@", "x://:***@"),
            (
                "alice:pw@127.0.0.1:1 has no scheme",
                "alice:***@127.0.0.1:1 has no scheme",
            ),
            ("url: (redis://u:pw@h:1)", "url: (redis://u:***@h:1)"),
            (
                "InvalidUrl(\"\\\"redis://u:pw@h:1\\\"\")",
                "InvalidUrl(\"\\\"redis://u:***@h:1\\\"\")",
            ),
            ("a@b, x: y", "a@b, x: y"),
            ("é redis://u:pé@h é", "é redis://u:***@h é"),
        ];
        for (text, shown) in cases {
            assert_eq!(redact(text), shown, "{text}");
        }
    }
}
