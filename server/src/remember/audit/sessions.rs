//! The browser's sign-in sessions, kept beside the audit log: creating one (a
//! random cookie secret and CSRF token), finding one by its cookie, and ending
//! one. The table keeps only the secret's SHA-256.

use std::time::Duration;

use lockscope_model::time::Millis;
use sha2::{Digest, Sha256};
use sqlx::Row;

use super::{AuditError, AuditLog};

/// A new sign-in session, to hand to the browser.
#[derive(Clone, PartialEq, Eq)]
pub struct NewSession {
    /// The secret (64 hex digits) that goes in the cookie; only its hash is stored.
    pub cookie: String,
    /// The CSRF token (64 hex digits) the session's forms send back.
    pub csrf: String,
    /// When the session ends (unix ms).
    pub expires_at: Millis,
}

/// A live sign-in session, found by its cookie.
#[derive(Clone, PartialEq, Eq)]
pub struct WebSession {
    pub actor: String,
    pub csrf: String,
    pub expires_at: Millis,
}

// Secrets stay out of logs.
impl std::fmt::Debug for NewSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewSession")
            .field("cookie", &"…")
            .field("csrf", &"…")
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

impl std::fmt::Debug for WebSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebSession")
            .field("actor", &self.actor)
            .field("csrf", &"…")
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

impl AuditLog {
    /// Signs `actor` in for `ttl` from `now_ms`: a new random cookie secret and
    /// CSRF token (32 bytes each from the operating system, hex). Removes the
    /// sessions that have expired by `now_ms` first.
    pub async fn create_session(&self, actor: &str, ttl: Duration, now_ms: Millis) -> Result<NewSession, AuditError> {
        let cookie = random_hex()?;
        let csrf = random_hex()?;
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        let expires_at = now_ms.saturating_add(ttl_ms);
        let q = self.sql("DELETE FROM lockscope_web_sessions WHERE expires_at <= $1");
        sqlx::query(&q)
            .bind(now_ms)
            .execute(&self.inner.pool)
            .await
            .map_err(|e| self.error("removing expired sessions", e))?;
        let q = self.sql(
            "INSERT INTO lockscope_web_sessions (secret_sha256, actor, csrf, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5)",
        );
        sqlx::query(&q)
            .bind(digest(&cookie))
            .bind(actor)
            .bind(csrf.as_str())
            .bind(now_ms)
            .bind(expires_at)
            .execute(&self.inner.pool)
            .await
            .map_err(|e| self.error("creating a session", e))?;
        Ok(NewSession {
            cookie,
            csrf,
            expires_at,
        })
    }

    /// The session whose cookie secret is `cookie`, unless it has expired by
    /// `now_ms` (or never existed, or was deleted).
    pub async fn session(&self, cookie: &str, now_ms: Millis) -> Result<Option<WebSession>, AuditError> {
        let what = "reading a session";
        // The lookup is by the secret's hash: its timing tells nothing about the secret.
        let q = self.sql(
            "SELECT actor, csrf, expires_at FROM lockscope_web_sessions \
             WHERE secret_sha256 = $1 AND expires_at > $2",
        );
        let row = sqlx::query(&q)
            .bind(digest(cookie))
            .bind(now_ms)
            .fetch_optional(&self.inner.pool)
            .await
            .map_err(|e| self.error(what, e))?;
        let Some(row) = row else { return Ok(None) };
        let session = (|| {
            Ok::<_, sqlx::Error>(WebSession {
                actor: row.try_get(0)?,
                csrf: row.try_get(1)?,
                expires_at: row.try_get(2)?,
            })
        })();
        session.map(Some).map_err(|e| self.error(what, e))
    }

    /// Ends the session whose cookie secret is `cookie` (signing out); whether
    /// there was one.
    pub async fn delete_session(&self, cookie: &str) -> Result<bool, AuditError> {
        let q = self.sql("DELETE FROM lockscope_web_sessions WHERE secret_sha256 = $1");
        let done = sqlx::query(&q)
            .bind(digest(cookie))
            .execute(&self.inner.pool)
            .await
            .map_err(|e| self.error("deleting a session", e))?;
        Ok(done.rows_affected() > 0)
    }
}

/// 32 random bytes from the operating system, as 64 hex digits.
fn random_hex() -> Result<String, AuditError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| AuditError::Io {
        what: "reading the operating system's random number generator".into(),
        source: match e.raw_os_error() {
            Some(code) => std::io::Error::from_raw_os_error(code),
            None => std::io::Error::other(e.to_string()),
        },
    })?;
    Ok(hex::encode(bytes))
}

/// What the database keeps of a cookie secret: its SHA-256, hex.
fn digest(cookie: &str) -> String {
    hex::encode(Sha256::digest(cookie.as_bytes()))
}
