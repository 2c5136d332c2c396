//! [`redact_url`]: a database URL fit for logs and error messages. At the
//! bottom of the crate: every module that names a URL in an error uses it.

/// The URL with its password (in the authority or a `password=` parameter)
/// replaced by `***`, for logs and error messages.
///
/// # Examples
/// ```
/// assert_eq!(
///     idmint_sql::redact_url("postgres://app:s3cret@db:5432/ids"),
///     "postgres://app:***@db:5432/ids"
/// );
/// ```
pub fn redact_url(url: &str) -> String {
    let (head, query) = match url.split_once('?') {
        Some((h, q)) => (h, Some(q)),
        None => (url, None),
    };
    let mut out = match head.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = match rest.find('/') {
                Some(i) => rest.split_at(i),
                None => (rest, ""),
            };
            let authority = match authority.rsplit_once('@') {
                Some((userinfo, host)) => match userinfo.split_once(':') {
                    Some((user, _password)) => format!("{user}:***@{host}"),
                    None => authority.to_owned(),
                },
                None => authority.to_owned(),
            };
            format!("{scheme}://{authority}{path}")
        }
        // Not a URL, but it may still hold a password (`postgres:u:pw@h/db`):
        // hide everything between the scheme and the last '@'.
        None => match (head.split_once(':'), head.rsplit_once('@')) {
            (Some((scheme, _)), Some((_, host))) => format!("{scheme}:***@{host}"),
            _ => head.to_owned(),
        },
    };
    if let Some(query) = query {
        let params: Vec<String> = query
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if k.to_ascii_lowercase().contains("password") => format!("{k}=***"),
                _ => kv.to_owned(),
            })
            .collect();
        out.push('?');
        out.push_str(&params.join("&"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords() {
        assert_eq!(
            redact_url("postgres://app:s3cret@db:5432/ids"),
            "postgres://app:***@db:5432/ids"
        );
        assert_eq!(
            redact_url("mysql://root@127.0.0.1/test?password=x&ssl-mode=disabled"),
            "mysql://root@127.0.0.1/test?password=***&ssl-mode=disabled"
        );
        assert_eq!(redact_url("sqlite:///tmp/x.db"), "sqlite:///tmp/x.db");
        assert_eq!(
            redact_url("postgres://a:b@c:d@h/db"),
            "postgres://a:***@h/db"
        );
        assert_eq!(
            redact_url("postgres://app:s3cret@h1:5432,h2:5432/ids?target_session_attrs=read-write"),
            "postgres://app:***@h1:5432,h2:5432/ids?target_session_attrs=read-write"
        );
        assert_eq!(redact_url("postgres:u:pw@h1/db"), "postgres:***@h1/db");
    }
}
