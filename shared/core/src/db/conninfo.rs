//! Connection-string edits, for both forms libpq accepts: the URL form
//! (`postgres[ql]://user:password@host:port/dbname?key=value&…`) and the key=value form
//! (`host=h user=u dbname=d options='-c a=b'`).
//!
//! Invariants:
//! - This is the one place that rewrites a connection string (the testkit's and the bench's scratch
//!   databases, the `clinic_app` role of `clinic dev`, and the TLS settings tokio-postgres does not
//!   know). Parsing follows tokio-postgres: URL query values are percent-decoded, key=value values
//!   may be single-quoted with backslash escapes.
//! - An edit changes only what it names: every other parameter keeps its value and its place, and a
//!   URL keeps its scheme, credentials and hosts byte for byte.
//! - [`ConnInfo::redacted`] never shows a password, in either form.

use std::fmt;

use super::DbError;

/// A parsed connection string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnInfo {
    form: Form,
    /// Parameters in order (URL query or key=value pairs), decoded.
    params: Vec<(String, String)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Form {
    /// Scheme and authority (`postgres://user@host:port`) and the decoded database of the path.
    Url {
        prefix: String,
        database: Option<String>,
    },
    KeyValue,
}

impl ConnInfo {
    /// Parses either form; fails on an unterminated quote or a URL parameter without `=`.
    pub fn parse(text: &str) -> Result<Self, DbError> {
        let text = text.trim();
        match ["postgres://", "postgresql://"].iter().find(|scheme| text.starts_with(*scheme)) {
            Some(scheme) => parse_url(text, scheme.len()),
            None => Ok(ConnInfo { form: Form::KeyValue, params: parse_key_values(text)? }),
        }
    }

    /// The decoded value of parameter `key` (the last one when repeated, as libpq reads it). For a
    /// URL, `dbname` is the path's database unless a `dbname` parameter overrides it.
    pub fn get(&self, key: &str) -> Option<&str> {
        let param = self.params.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
        match (&self.form, key) {
            (Form::Url { database, .. }, "dbname") => param.or(database.as_deref()),
            _ => param,
        }
    }

    /// Sets `key` to `value`: the first occurrence is replaced (later ones removed), else it is appended.
    pub fn set(&mut self, key: &str, value: &str) {
        match self.params.iter().position(|(k, _)| k == key) {
            Some(first) => {
                self.params[first].1 = value.to_owned();
                let mut index = 0;
                self.params.retain(|(k, _)| {
                    index += 1;
                    index - 1 == first || k != key
                });
            }
            None => self.params.push((key.to_owned(), value.to_owned())),
        }
    }

    /// Removes every `key` parameter and returns the value libpq would have used (the last one).
    pub fn remove(&mut self, key: &str) -> Option<String> {
        let value = self.params.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.clone());
        self.params.retain(|(k, _)| k != key);
        value
    }

    /// Points the string at database `name`.
    pub fn set_database(&mut self, name: &str) {
        match &mut self.form {
            Form::Url { database, .. } => {
                *database = Some(name.to_owned());
                self.params.retain(|(k, _)| k != "dbname");
            }
            Form::KeyValue => self.set("dbname", name),
        }
    }

    /// Adds `-c role=<role>` to `options`, so every session runs as `role` (the login user must be
    /// allowed to `SET ROLE` to it). Earlier options are kept.
    pub fn add_role(&mut self, role: &str) {
        let setting = format!("-c role={}", role.replace('\\', "\\\\").replace(' ', "\\ "));
        let options = match self.get("options") {
            Some(existing) if !existing.trim().is_empty() => format!("{existing} {setting}"),
            _ => setting,
        };
        self.set("options", &options);
    }

    /// The string without its password (for messages).
    pub fn redacted(&self) -> String {
        let mut copy = self.clone();
        copy.remove("password");
        if let Form::Url { prefix, .. } = &mut copy.form {
            let scheme_end = prefix.find("://").map_or(0, |i| i + 3);
            if let Some(at) = prefix[scheme_end..].rfind('@').map(|i| scheme_end + i) {
                let user_info = &prefix[scheme_end..at];
                if let Some(colon) = user_info.find(':') {
                    prefix.replace_range(scheme_end + colon..at, "");
                }
            }
        }
        copy.to_string()
    }
}

impl fmt::Display for ConnInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.form {
            Form::Url { prefix, database } => {
                f.write_str(prefix)?;
                if let Some(database) = database {
                    write!(f, "/{}", percent_encode(database))?;
                }
                for (index, (key, value)) in self.params.iter().enumerate() {
                    let separator = if index == 0 { '?' } else { '&' };
                    write!(f, "{separator}{}={}", percent_encode(key), percent_encode(value))?;
                }
                Ok(())
            }
            Form::KeyValue => {
                let pairs: Vec<String> =
                    self.params.iter().map(|(key, value)| format!("{key}={}", quote_value(value))).collect();
                f.write_str(&pairs.join(" "))
            }
        }
    }
}

/// `url` naming database `name` instead (either form). An unparsable string is returned unchanged:
/// connecting with it reports the problem.
pub fn with_database(url: &str, name: &str) -> String {
    edit(url, |info| info.set_database(name))
}

/// `url` with `-c role=<role>` added to its `options` (either form); see [`ConnInfo::add_role`].
pub fn with_role(url: &str, role: &str) -> String {
    edit(url, |info| info.add_role(role))
}

/// `url` without its password, for error messages.
pub fn redact(url: &str) -> String {
    ConnInfo::parse(url).map_or_else(|_| "(unparsable connection string)".to_owned(), |info| info.redacted())
}

fn edit(url: &str, change: impl FnOnce(&mut ConnInfo)) -> String {
    match ConnInfo::parse(url) {
        Ok(mut info) => {
            change(&mut info);
            info.to_string()
        }
        Err(_) => url.to_owned(),
    }
}

fn parse_url(text: &str, scheme_len: usize) -> Result<ConnInfo, DbError> {
    let rest = &text[scheme_len..];
    // The authority ends at the first `/` or `?` after the credentials (a password may hold either
    // only percent-encoded, as in tokio-postgres).
    let host_start = rest.find('@').map_or(0, |at| at + 1);
    let host_end = rest[host_start..].find(['/', '?']).map_or(rest.len(), |i| host_start + i);
    let prefix = text[..scheme_len + host_end].to_owned();
    let after_host = &rest[host_end..];
    let query_start = after_host.find('?').unwrap_or(after_host.len());
    let path = after_host[..query_start].strip_prefix('/').unwrap_or("");
    let database = (!path.is_empty()).then(|| percent_decode(path));
    let mut params = Vec::new();
    for pair in after_host[query_start..].trim_start_matches('?').split('&').filter(|pair| !pair.is_empty()) {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(DbError::InvalidUrl(format!(
                "URL parameter `{}` has no `=value`",
                percent_decode(pair)
            )));
        };
        params.push((percent_decode(key), percent_decode(value)));
    }
    Ok(ConnInfo { form: Form::Url { prefix, database }, params })
}

/// libpq's key=value syntax: `key = value` pairs separated by spaces; a value is single-quoted (with
/// `\'` and `\\`) or a run of non-space characters (with backslash escapes).
fn parse_key_values(text: &str) -> Result<Vec<(String, String)>, DbError> {
    let mut params = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(params);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(DbError::InvalidUrl(format!("connection parameter `{key}` has no `=value`")));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    Some('\'') => break,
                    Some('\\') => value.extend(chars.next()),
                    Some(c) => value.push(c),
                    None => {
                        return Err(DbError::InvalidUrl(format!("unterminated quoted value of `{key}`")));
                    }
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.extend(chars.next());
                } else {
                    value.push(c);
                }
            }
        }
        params.push((key, value));
    }
}

/// A key=value value, quoted only when it must be.
fn quote_value(value: &str) -> String {
    let plain = !value.is_empty() && !value.contains(|c: char| c.is_whitespace() || c == '\'' || c == '\\');
    if plain {
        value.to_owned()
    } else {
        format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"))
    }
}

fn percent_encode(value: &str) -> String {
    value
        .bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (byte as char).to_string(),
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

fn percent_decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_database_is_replaced_or_added_in_both_forms() {
        assert_eq!(
            with_database("postgres://postgres@127.0.0.1:5432/postgres", "clinic_test_x"),
            "postgres://postgres@127.0.0.1:5432/clinic_test_x"
        );
        assert_eq!(
            with_database("postgresql://u:p%2Fw@db:5432?sslmode=require", "t"),
            "postgresql://u:p%2Fw@db:5432/t?sslmode=require"
        );
        assert_eq!(with_database("postgres://u@h:1", "b2"), "postgres://u@h:1/b2");
        assert_eq!(
            with_database("postgres://u@h/d?dbname=other&sslmode=disable", "n"),
            "postgres://u@h/n?sslmode=disable"
        );
        assert_eq!(with_database("host=db user=u", "t"), "host=db user=u dbname=t");
        assert_eq!(with_database("host=db dbname = 'a b' user=u", "t"), "host=db dbname=t user=u");
        let config: tokio_postgres::Config = with_database("host=h dbname=x", "my db").parse().unwrap();
        assert_eq!(config.get_dbname(), Some("my db"));
    }

    #[test]
    fn the_role_is_added_to_existing_options_in_both_forms() {
        assert_eq!(
            with_role("postgres://u@h/d", "clinic_app"),
            "postgres://u@h/d?options=-c%20role%3Dclinic_app"
        );
        assert_eq!(
            with_role("postgres://u@h/d?sslmode=disable&options=-c%20a%3Db", "r"),
            "postgres://u@h/d?sslmode=disable&options=-c%20a%3Db%20-c%20role%3Dr"
        );
        assert_eq!(with_role("host=h", "r"), "host=h options='-c role=r'");
        assert_eq!(with_role("host=h options='-c a=b'", "r"), "host=h options='-c a=b -c role=r'");
        for url in ["postgres://u@h/d?sslmode=disable", "host=h dbname=d sslmode=disable"] {
            let config: tokio_postgres::Config = with_role(url, "r").parse().unwrap();
            assert_eq!(config.get_options(), Some("-c role=r"), "{url}");
            assert_eq!(config.get_dbname(), Some("d"), "{url}");
        }
    }

    #[test]
    fn key_values_parse_quotes_and_escapes() {
        let info =
            ConnInfo::parse(r"host=h  password='it\'s a \\ secret' user = u sslmode=verify-full").unwrap();
        assert_eq!(info.get("password"), Some(r"it's a \ secret"));
        assert_eq!(info.get("user"), Some("u"));
        assert_eq!(info.get("sslmode"), Some("verify-full"));
        assert!(ConnInfo::parse("host='h").is_err());
        assert!(ConnInfo::parse("host").is_err());
        let config: tokio_postgres::Config =
            ConnInfo::parse(r"host=h password='it\'s'").unwrap().to_string().parse().unwrap();
        assert_eq!(config.get_password(), Some(&b"it's"[..]));
    }

    #[test]
    fn parameters_are_read_set_and_removed() {
        let mut info =
            ConnInfo::parse("postgres://u@h/d?sslmode=verify-full&sslrootcert=%2Fetc%2Frds.pem&x=1").unwrap();
        assert_eq!(info.get("dbname"), Some("d"));
        assert_eq!(info.remove("sslrootcert").as_deref(), Some("/etc/rds.pem"));
        info.set("sslmode", "require");
        assert_eq!(info.to_string(), "postgres://u@h/d?sslmode=require&x=1");
        assert!(ConnInfo::parse("postgres://u@h/d?novalue").is_err());
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact("postgres://u:secret@h:1/d"), "postgres://u@h:1/d");
        assert_eq!(redact("postgres://u@h/d"), "postgres://u@h/d");
        assert_eq!(
            redact("postgres://u@h/d?password=secret&sslmode=require"),
            "postgres://u@h/d?sslmode=require"
        );
        assert_eq!(redact("host=h password=secret user=u"), "host=h user=u");
    }
}
