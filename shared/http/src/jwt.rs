//! Compact HS256 JSON Web Tokens (RFC 7519), the only kind the local server issues and verifies.
//!
//! Written on the `hmac` and `sha2` crates the workspace already uses, instead of a general JWT
//! library: the one this replaced pulled in an RSA implementation with a known, unfixed advisory
//! (RUSTSEC-2023-0071) although only HMAC tokens were ever used (issue 39 item 7).
//!
//! Invariants:
//! - Only `alg: HS256` verifies: `none`, every other algorithm and any `crit` header are refused, so a
//!   token cannot choose how it is checked.
//! - The signature is compared in constant time (`Mac::verify_slice`) before any claim is read.
//! - `exp`, `iss` and `aud` are required ([`Expected`]); `exp` and `nbf` (when present) are checked
//!   with a small leeway for clock skew; `aud` may be a string or an array holding the audience.
//! - Failures carry no token text or claim value.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Seconds of clock skew tolerated on `exp` and `nbf`.
pub const LEEWAY_SECS: i64 = 5;

/// Why a token was not issued or not accepted. Never carries the token or a claim's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum JwtError {
    #[error("the token is not three base64url parts holding JSON")]
    Malformed,
    #[error("the token's algorithm is not HS256")]
    Algorithm,
    #[error("the token's signature does not verify")]
    Signature,
    #[error("the token has expired")]
    Expired,
    #[error("the token is not valid yet")]
    NotYetValid,
    #[error("the token lacks the claim {0}")]
    Missing(&'static str),
    #[error("the token's issuer is not accepted")]
    Issuer,
    #[error("the token's audience is not accepted")]
    Audience,
    #[error("the token's claims do not have the expected shape")]
    Claims,
    #[error("the signing key cannot be used")]
    Key,
}

/// What a verified token must say besides its signature.
#[derive(Debug, Clone, Copy)]
pub struct Expected<'a> {
    pub issuer: &'a str,
    pub audience: &'a str,
}

fn mac(secret: &[u8]) -> Result<HmacSha256, JwtError> {
    HmacSha256::new_from_slice(secret).map_err(|_| JwtError::Key)
}

/// Signs `claims` as an HS256 token.
pub fn sign(secret: &[u8], claims: &impl Serialize) -> Result<String, JwtError> {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
    let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(claims).map_err(|_| JwtError::Claims)?);
    let signing_input = format!("{header}.{payload}");
    let mut mac = mac(secret)?;
    mac.update(signing_input.as_bytes());
    let signature = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
    Ok(format!("{signing_input}.{signature}"))
}

fn json_part(part: &str) -> Result<Value, JwtError> {
    let bytes = URL_SAFE_NO_PAD.decode(part).map_err(|_| JwtError::Malformed)?;
    match serde_json::from_slice(&bytes) {
        Ok(value @ Value::Object(_)) => Ok(value),
        _ => Err(JwtError::Malformed),
    }
}

/// A numeric date claim (seconds since the epoch), if present; present but not a number is malformed.
fn numeric_date(claims: &Value, name: &'static str) -> Result<Option<i64>, JwtError> {
    match claims.get(name) {
        None => Ok(None),
        Some(value) => value.as_f64().map(|seconds| Some(seconds as i64)).ok_or(JwtError::Claims),
    }
}

/// Verifies an HS256 token at `now` (seconds since the epoch) and answers its claims.
pub fn verify<T: DeserializeOwned>(
    secret: &[u8],
    token: &str,
    expected: Expected<'_>,
    now: i64,
) -> Result<T, JwtError> {
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(JwtError::Malformed);
    };
    let header_json = json_part(header)?;
    if header_json.get("alg").and_then(Value::as_str) != Some("HS256") || header_json.get("crit").is_some() {
        return Err(JwtError::Algorithm);
    }
    let signature = URL_SAFE_NO_PAD.decode(signature).map_err(|_| JwtError::Malformed)?;
    let mut mac = mac(secret)?;
    mac.update(header.as_bytes());
    mac.update(b".");
    mac.update(payload.as_bytes());
    mac.verify_slice(&signature).map_err(|_| JwtError::Signature)?;

    let claims = json_part(payload)?;
    let exp = numeric_date(&claims, "exp")?.ok_or(JwtError::Missing("exp"))?;
    if exp < now - LEEWAY_SECS {
        return Err(JwtError::Expired);
    }
    if numeric_date(&claims, "nbf")?.is_some_and(|nbf| nbf > now + LEEWAY_SECS) {
        return Err(JwtError::NotYetValid);
    }
    match claims.get("iss") {
        None => return Err(JwtError::Missing("iss")),
        Some(iss) if iss.as_str() != Some(expected.issuer) => return Err(JwtError::Issuer),
        Some(_) => {}
    }
    let audience_matches = match claims.get("aud") {
        None => return Err(JwtError::Missing("aud")),
        Some(Value::String(aud)) => aud == expected.audience,
        Some(Value::Array(auds)) => auds.iter().any(|aud| aud.as_str() == Some(expected.audience)),
        Some(_) => false,
    };
    if !audience_matches {
        return Err(JwtError::Audience);
    }
    serde_json::from_value(claims).map_err(|_| JwtError::Claims)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const EXPECTED: Expected<'static> = Expected { issuer: "iss-1", audience: "aud-1" };
    const NOW: i64 = 1_900_000_000;

    fn claims() -> Value {
        json!({"sub": "s", "iss": "iss-1", "aud": "aud-1", "exp": NOW + 60, "nbf": NOW - 1, "iat": NOW})
    }

    fn check(token: &str) -> Result<Value, JwtError> {
        verify::<Value>(b"secret", token, EXPECTED, NOW)
    }

    fn with(change: impl FnOnce(&mut Value)) -> String {
        let mut claims = claims();
        change(&mut claims);
        sign(b"secret", &claims).unwrap()
    }

    #[test]
    fn a_signed_token_verifies_and_answers_its_claims() {
        let token = sign(b"secret", &claims()).unwrap();
        assert_eq!(check(&token).unwrap(), claims());
        let array_audience = with(|c| c["aud"] = json!(["other", "aud-1"]));
        assert!(check(&array_audience).is_ok());
        // Within the leeway.
        assert!(check(&with(|c| c["exp"] = json!(NOW - LEEWAY_SECS))).is_ok());
        assert!(check(&with(|c| c["nbf"] = json!(NOW + LEEWAY_SECS))).is_ok());
    }

    #[test]
    fn every_broken_rule_is_refused() {
        let good = sign(b"secret", &claims()).unwrap();
        assert_eq!(verify::<Value>(b"other", &good, EXPECTED, NOW), Err(JwtError::Signature));
        assert_eq!(check(&with(|c| c["exp"] = json!(NOW - 60))), Err(JwtError::Expired));
        assert_eq!(check(&with(|c| c["nbf"] = json!(NOW + 86_400))), Err(JwtError::NotYetValid));
        assert_eq!(check(&with(|c| c["iss"] = json!("iss-2"))), Err(JwtError::Issuer));
        assert_eq!(check(&with(|c| c["aud"] = json!(["aud-2"]))), Err(JwtError::Audience));
        assert_eq!(check(&with(|c| c["exp"] = json!("soon"))), Err(JwtError::Claims));
        for name in ["exp", "iss", "aud"] {
            let token = with(|c| {
                c.as_object_mut().unwrap().remove(name);
            });
            assert_eq!(check(&token), Err(JwtError::Missing(name)));
        }
        let parts: Vec<&str> = good.split('.').collect();
        let header = |json: &str| URL_SAFE_NO_PAD.encode(json);
        for (what, token, error) in [
            ("alg none", format!("{}.{}.", header(r#"{"alg":"none"}"#), parts[1]), JwtError::Algorithm),
            (
                "HS512 header",
                format!("{}.{}.{}", header(r#"{"alg":"HS512"}"#), parts[1], parts[2]),
                JwtError::Algorithm,
            ),
            (
                "crit",
                format!("{}.{}.{}", header(r#"{"alg":"HS256","crit":["x"]}"#), parts[1], parts[2]),
                JwtError::Algorithm,
            ),
            ("two parts", format!("{}.{}", parts[0], parts[1]), JwtError::Malformed),
            ("four parts", format!("{good}.x"), JwtError::Malformed),
            ("not base64", format!("{}.{}.!!", parts[0], parts[1]), JwtError::Malformed),
            (
                "tampered payload",
                format!("{}.{}.{}", parts[0], header(r#"{"exp":1}"#), parts[2]),
                JwtError::Signature,
            ),
        ] {
            assert_eq!(check(&token).unwrap_err(), error, "{what}");
        }
    }

    /// Issue 39 item 7: RUSTSEC-2023-0071 (`rsa`, no fixed release) came in through the JWT library's
    /// RustCrypto backend although only HMAC tokens are used. No crate of the workspace may pull it in.
    #[test]
    fn the_lockfile_holds_no_rsa_crate() {
        let lockfile = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.lock");
        let text = std::fs::read_to_string(&lockfile).expect("Cargo.lock at the workspace root");
        assert!(!text.lines().any(|line| line.trim() == r#"name = "rsa""#), "Cargo.lock holds the rsa crate");
    }
}
