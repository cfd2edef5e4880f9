//! [`AccessTokens`]: the tokens a server accepts, several at once, replaceable while it runs
//! (a rotation adds the new token, moves the clients, then drops the old one; nothing is
//! restarted and no connection is dropped).

use std::path::Path;
use std::sync::{Arc, RwLock};

use subtle::ConstantTimeEq;

use crate::ConfigError;
use crate::limits::{
    ACCESS_TOKEN_LEN_MAX, ACCESS_TOKEN_LEN_MIN, ACCESS_TOKENS_MAX, TOKENS_FILE_SIZE_MAX,
};

/// The set of access tokens a server (or one of its databases) accepts. Cheap to check
/// against, and replaced as a whole: a request sees the old set or the new one, never a mix.
///
/// # Examples
/// ```
/// use std::sync::Arc;
/// use tuplekv_server::{AccessTokens, ServerConfig};
///
/// let tokens = Arc::new(AccessTokens::new(["old-token-0123", "new-token-4567"])?);
/// let config = ServerConfig::with_access_tokens(Arc::clone(&tokens));
/// assert!(tokens.accepts("old-token-0123"));
/// // Later, once every client has the new token:
/// tokens.replace(["new-token-4567"])?;
/// assert!(!tokens.accepts("old-token-0123"));
/// assert!(config.access_tokens().accepts("new-token-4567"));
/// # Ok::<(), tuplekv_server::ConfigError>(())
/// ```
#[derive(Debug)]
pub struct AccessTokens {
    current: RwLock<Arc<[String]>>,
}

impl AccessTokens {
    /// A set holding `tokens` (duplicates are kept once).
    ///
    /// # Errors
    /// As [`check_tokens`]: no token, more than [`ACCESS_TOKENS_MAX`], or one that is too
    /// short, too long or not printable ASCII.
    pub fn new<I, T>(tokens: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator<Item = T>,
        T: Into<String>,
    {
        Ok(AccessTokens {
            current: RwLock::new(check_tokens(tokens)?),
        })
    }

    /// Replaces the whole set with `tokens`, checked first: on an error the set is unchanged.
    /// Returns how many tokens the new set holds.
    ///
    /// # Errors
    /// As [`AccessTokens::new`].
    pub fn replace<I, T>(&self, tokens: I) -> Result<usize, ConfigError>
    where
        I: IntoIterator<Item = T>,
        T: Into<String>,
    {
        let checked = check_tokens(tokens)?;
        let len = checked.len();
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = checked;
        Ok(len)
    }

    /// How many tokens are valid now (at least one).
    pub fn len(&self) -> usize {
        self.snapshot().len()
    }

    /// Always false: a set holds at least one token. (For the `len` convention.)
    pub fn is_empty(&self) -> bool {
        self.snapshot().is_empty()
    }

    /// Whether `presented` is one of the tokens. Compared in constant time with every token
    /// (no early exit on a match), so timing tells neither which token matched nor how much
    /// of one.
    pub fn accepts(&self, presented: &str) -> bool {
        // Read under the lock, without cloning the set: this runs on every request.
        let tokens = self.current.read().unwrap_or_else(|e| e.into_inner());
        let mut found = subtle::Choice::from(0u8);
        for token in tokens.iter() {
            found |= presented.as_bytes().ct_eq(token.as_bytes());
        }
        found.into()
    }

    fn snapshot(&self) -> Arc<[String]> {
        Arc::clone(&self.current.read().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Checks a list of tokens as a server would hold them: at least one, at most
/// [`ACCESS_TOKENS_MAX`] distinct ones, each of [`ACCESS_TOKEN_LEN_MIN`] to
/// [`ACCESS_TOKEN_LEN_MAX`] printable ASCII characters, spaces allowed inside but not at
/// either end (it travels as `Authorization: Bearer <token>`).
///
/// # Errors
/// The first rule broken.
pub fn check_tokens<I, T>(tokens: I) -> Result<Arc<[String]>, ConfigError>
where
    I: IntoIterator<Item = T>,
    T: Into<String>,
{
    let mut out: Vec<String> = Vec::new();
    for token in tokens {
        let token = token.into();
        check_token(&token)?;
        if !out.contains(&token) {
            if out.len() == ACCESS_TOKENS_MAX {
                return Err(ConfigError::TooManyAccessTokens {
                    max: ACCESS_TOKENS_MAX,
                });
            }
            out.push(token);
        }
    }
    if out.is_empty() {
        return Err(ConfigError::NoAccessToken);
    }
    Ok(out.into())
}

fn check_token(token: &str) -> Result<(), ConfigError> {
    let len = token.chars().count();
    if len < ACCESS_TOKEN_LEN_MIN {
        return Err(ConfigError::AccessTokenTooShort { len });
    }
    if token.len() > ACCESS_TOKEN_LEN_MAX {
        return Err(ConfigError::AccessTokenTooLong { len: token.len() });
    }
    // Spaces inside are fine (`Authorization: Bearer a b` carries `a b`); at either end HTTP
    // would strip them, and control or non-ASCII characters cannot travel in a header.
    let printable = token.bytes().all(|b| b.is_ascii_graphic() || b == b' ');
    if !printable || token.starts_with(' ') || token.ends_with(' ') {
        return Err(ConfigError::AccessTokenNotPrintable);
    }
    Ok(())
}

/// The tokens of a tokens file's text: one per line; blank lines and lines starting with
/// `#` are skipped, and spaces around a token are dropped.
///
/// # Errors
/// [`ConfigError::TokensFile`] naming the line of a token that breaks a rule, or the rule
/// the whole list breaks (none, too many).
pub fn parse_tokens_file(text: &str) -> Result<Vec<String>, ConfigError> {
    let mut tokens = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        check_token(line).map_err(|e| ConfigError::TokensFile {
            reason: format!("line {}: {e}", i + 1),
        })?;
        tokens.push(line.to_owned());
    }
    check_tokens(tokens.iter().cloned()).map_err(|e| ConfigError::TokensFile {
        reason: e.to_string(),
    })?;
    Ok(tokens)
}

/// Reads and parses the tokens file at `path` (at most [`TOKENS_FILE_SIZE_MAX`] bytes).
///
/// # Errors
/// [`ConfigError::TokensFile`] when it cannot be read, is too large, is not UTF-8, or its
/// tokens break a rule (see [`parse_tokens_file`]).
pub fn read_tokens_file(path: &Path) -> Result<Vec<String>, ConfigError> {
    let fail = |reason: String| ConfigError::TokensFile {
        reason: format!("{}: {reason}", path.display()),
    };
    let len = std::fs::metadata(path)
        .map_err(|e| fail(format!("cannot read it: {e}")))?
        .len();
    if len > TOKENS_FILE_SIZE_MAX {
        return Err(fail(format!(
            "it is {len} bytes; a tokens file holds at most {TOKENS_FILE_SIZE_MAX}"
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| fail(format!("cannot read it: {e}")))?;
    parse_tokens_file(&text).map_err(|e| match e {
        ConfigError::TokensFile { reason } => fail(reason),
        other => fail(other.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(i: usize) -> String {
        format!("token-number-{i:04}")
    }

    #[test]
    fn every_token_of_the_set_is_accepted_and_nothing_else() {
        let tokens = AccessTokens::new([token(1), token(2)]).expect("valid");
        assert!(tokens.accepts(&token(1)));
        assert!(tokens.accepts(&token(2)));
        assert!(!tokens.accepts(&token(3)));
        assert!(!tokens.accepts(""));
        assert!(
            !tokens.accepts(&token(1)[..10]),
            "a prefix is not the token"
        );
        assert!(
            !tokens.accepts(&format!("{}x", token(1))),
            "nor a longer one"
        );
    }

    #[test]
    fn a_replacement_takes_effect_whole_and_a_bad_one_changes_nothing() {
        let tokens = AccessTokens::new([token(1)]).expect("valid");
        assert_eq!(tokens.replace([token(2), token(3)]), Ok(2));
        assert!(!tokens.accepts(&token(1)));
        assert!(tokens.accepts(&token(3)));
        let err = tokens
            .replace([token(4), "short".to_owned()])
            .expect_err("one bad token refuses the set");
        assert_eq!(err, ConfigError::AccessTokenTooShort { len: 5 });
        assert!(tokens.accepts(&token(2)), "the old set stays");
        assert!(
            !tokens.accepts(&token(4)),
            "no part of the new one is taken"
        );
        assert_eq!(
            tokens.replace(Vec::<String>::new()),
            Err(ConfigError::NoAccessToken)
        );
        assert_eq!(tokens.len(), 2);
    }

    #[test]
    fn the_token_count_limit_holds_at_and_past_it() {
        let at: Vec<String> = (0..ACCESS_TOKENS_MAX).map(token).collect();
        assert_eq!(
            AccessTokens::new(at.clone()).map(|t| t.len()),
            Ok(ACCESS_TOKENS_MAX)
        );
        let mut past = at.clone();
        past.push(token(ACCESS_TOKENS_MAX));
        assert_eq!(
            AccessTokens::new(past).map(|t| t.len()),
            Err(ConfigError::TooManyAccessTokens {
                max: ACCESS_TOKENS_MAX
            })
        );
        let mut duplicated = at;
        duplicated.push(token(0));
        assert_eq!(
            AccessTokens::new(duplicated).map(|t| t.len()),
            Ok(ACCESS_TOKENS_MAX),
            "a repeated token counts once"
        );
    }

    #[test]
    fn token_lengths_are_checked_at_and_past_both_limits() {
        let at_min = "a".repeat(ACCESS_TOKEN_LEN_MIN);
        assert!(check_token(&at_min).is_ok());
        assert_eq!(
            check_token(&at_min[1..]),
            Err(ConfigError::AccessTokenTooShort {
                len: ACCESS_TOKEN_LEN_MIN - 1
            })
        );
        let at_max = "b".repeat(ACCESS_TOKEN_LEN_MAX);
        assert!(check_token(&at_max).is_ok());
        assert_eq!(
            check_token(&format!("{at_max}b")),
            Err(ConfigError::AccessTokenTooLong {
                len: ACCESS_TOKEN_LEN_MAX + 1
            })
        );
        assert!(
            check_token("with a space in it").is_ok(),
            "inner spaces travel"
        );
        for bad in [
            " leading-space-token",
            "trailing-space-token ",
            "tab\tinside-token",
            "non-ascii-tökenxx",
        ] {
            assert_eq!(
                check_token(bad),
                Err(ConfigError::AccessTokenNotPrintable),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_tokens_file_skips_comments_and_blank_lines_and_names_a_bad_line() {
        let text = format!("# rotation of 2026-12\n\n  {}  \n{}\n", token(1), token(2));
        assert_eq!(parse_tokens_file(&text), Ok(vec![token(1), token(2)]));
        let bad = format!("{}\nshort\n", token(1));
        let err = parse_tokens_file(&bad).expect_err("line 2 is too short");
        assert!(err.to_string().contains("line 2"), "{err}");
        let empty = parse_tokens_file("# nothing\n\n").expect_err("no token");
        assert!(err_text(&empty).contains("no access token"), "{empty}");
    }

    fn err_text(e: &ConfigError) -> String {
        e.to_string()
    }

    #[test]
    fn a_tokens_file_is_read_up_to_its_size_limit() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("tokens");
        std::fs::write(&path, format!("{}\n", token(7))).expect("write");
        assert_eq!(read_tokens_file(&path), Ok(vec![token(7)]));
        // Exactly at the limit: one token, then comment lines filling the rest.
        let mut text = format!("{}\n", token(8));
        let filler = format!("#{}\n", "x".repeat(1000));
        while text.len() + filler.len() <= TOKENS_FILE_SIZE_MAX as usize {
            text.push_str(&filler);
        }
        text.push_str(&"#".repeat(TOKENS_FILE_SIZE_MAX as usize - text.len()));
        assert_eq!(text.len() as u64, TOKENS_FILE_SIZE_MAX);
        std::fs::write(&path, &text).expect("write");
        assert_eq!(read_tokens_file(&path), Ok(vec![token(8)]));
        text.push('#');
        std::fs::write(&path, &text).expect("write");
        let err = read_tokens_file(&path).expect_err("one byte past the limit");
        assert!(err.to_string().contains("at most"), "{err}");
        let missing = read_tokens_file(&dir.path().join("missing")).expect_err("missing");
        assert!(missing.to_string().contains("cannot read"), "{missing}");
    }
}
