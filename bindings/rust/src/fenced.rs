//! The seed's optimistic lock at a row of the caller's own database, with the lock's fencing
//! token as the row's version (docs/PROTOCOL.md §13): one statement that updates the row only
//! under a token at least as new as the one its last write stored. Every host's helper builds
//! it here (Python's `dlock.sql.fenced_update`, Node's `fencedUpdate`); Rust callers run it
//! with their own driver, in their own transaction.

use crate::Error;

/// How the caller's driver marks parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placeholder {
    /// `$1`, `$2`, … (tokio-postgres, sqlx on PostgreSQL, node-postgres).
    Numbered,
    /// `?` (mysql_async, sqlx on MySQL and SQLite, mysql2, Python's sqlite3).
    Question,
    /// `%s` (psycopg, PyMySQL, mysqlclient).
    Format,
}

impl Placeholder {
    /// The style named `name`: `numbered` (`$1`), `question` (`?`) or `format` (`%s`).
    pub fn parse(name: &str) -> Result<Placeholder, Error> {
        match name {
            "numbered" => Ok(Placeholder::Numbered),
            "question" => Ok(Placeholder::Question),
            "format" => Ok(Placeholder::Format),
            other => Err(Error::InvalidArgument(format!(
                "placeholder style {other:?}: use numbered ($1), question (?) or format (%s)"
            ))),
        }
    }
}

/// `UPDATE table SET v1 = …, vN = …, fence = … WHERE k1 = … AND kM = … AND fence <= …`: the
/// fenced update of one row, with `placeholder`'s parameters in this order — the new values
/// of `values` in order, the fencing token, the key values of `key` in order, the fencing
/// token again. It changes the row (one row affected) only if its `fence_column` holds no
/// newer token than the caller's; none affected means this holder's lock was lost and a
/// newer holder wrote (or no row has that key). Table and column names must be plain
/// identifiers (`[A-Za-z_][A-Za-z0-9_]*`, a table optionally `schema.table`); anything else,
/// or no key, is refused.
///
/// ```
/// use dlock::{fenced_update_sql, Placeholder};
/// let sql = fenced_update_sql("stock", &["item"], &["quantity"], "fence", Placeholder::Numbered)?;
/// assert_eq!(sql, "UPDATE stock SET quantity = $1, fence = $2 WHERE item = $3 AND fence <= $4");
/// # Ok::<(), dlock::Error>(())
/// ```
pub fn fenced_update_sql(
    table: &str,
    key: &[&str],
    values: &[&str],
    fence_column: &str,
    placeholder: Placeholder,
) -> Result<String, Error> {
    if key.is_empty() {
        return Err(Error::InvalidArgument(
            "a fenced update needs the key of the row to update".into(),
        ));
    }
    identifier(table, "table", true)?;
    identifier(fence_column, "fence column", false)?;
    for column in key.iter().chain(values) {
        identifier(column, "column", false)?;
    }
    let mut n = 0;
    let mut mark = || {
        n += 1;
        match placeholder {
            Placeholder::Numbered => format!("${n}"),
            Placeholder::Question => "?".to_owned(),
            Placeholder::Format => "%s".to_owned(),
        }
    };
    let mut sets: Vec<String> = values.iter().map(|c| format!("{c} = {}", mark())).collect();
    sets.push(format!("{fence_column} = {}", mark()));
    let mut wheres: Vec<String> = key.iter().map(|c| format!("{c} = {}", mark())).collect();
    wheres.push(format!("{fence_column} <= {}", mark()));
    Ok(format!(
        "UPDATE {table} SET {} WHERE {}",
        sets.join(", "),
        wheres.join(" AND ")
    ))
}

/// A plain SQL identifier, needing no quoting; `dotted` allows one `schema.` before it.
fn identifier(name: &str, what: &str, dotted: bool) -> Result<(), Error> {
    let plain = |part: &str| {
        part.bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && part.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    };
    let ok = match name.split_once('.') {
        Some((schema, rest)) if dotted => plain(schema) && plain(rest),
        Some(_) => false,
        None => plain(name),
    };
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "{what} {name:?} is not a plain SQL identifier"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_style_gives_the_parameters_in_one_order() {
        let build =
            |p| fenced_update_sql("app.stock", &["id", "site"], &["qty", "note"], "fence", p);
        assert_eq!(
            build(Placeholder::Numbered).unwrap(),
            "UPDATE app.stock SET qty = $1, note = $2, fence = $3 WHERE id = $4 AND site = $5 AND fence <= $6"
        );
        assert_eq!(
            build(Placeholder::Question).unwrap(),
            "UPDATE app.stock SET qty = ?, note = ?, fence = ? WHERE id = ? AND site = ? AND fence <= ?"
        );
        assert!(build(Placeholder::Format).unwrap().ends_with("fence <= %s"));
    }

    #[test]
    fn anything_but_plain_identifiers_and_a_key_is_refused() {
        let q = Placeholder::Question;
        for (table, key, values, fence) in [
            ("stock; DROP TABLE x", &["id"][..], &["qty"][..], "fence"),
            ("a.b.c", &["id"], &["qty"], "fence"),
            ("stock", &["id"], &["qty = 0 --"], "fence"),
            ("stock", &["1d"], &["qty"], "fence"),
            ("stock", &["id"], &["qty"], "app.fence"),
            ("stock", &["id"], &["qty"], ""),
            ("stock", &[], &["qty"], "fence"),
        ] {
            let err = fenced_update_sql(table, key, values, fence, q).unwrap_err();
            assert!(
                matches!(err, Error::InvalidArgument(_)),
                "{table} {key:?} {values:?} {fence}"
            );
        }
        assert!(Placeholder::parse("named").is_err());
    }
}
