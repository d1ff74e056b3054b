//! Who is calling: verified claims (`sub`, `workspace_id`, `role`) become a [`Caller`].
//!
//! Behind API Gateway the JWT authorizer has verified the token and the Lambda adapter inserts its
//! claims as [`VerifiedClaims`]; locally the router verifies an HS256 bearer token itself
//! ([`super::jwt`]) like the deployed authorizer does: `exp`, `iss` ([`LOCAL_ISSUER`]) and `aud`
//! ([`LOCAL_AUDIENCE`]) required, `nbf` checked when present; `alg: none` and every other algorithm
//! are rejected. A request without a
//! usable identity answers 401; tokens are never logged.
//!
//! A verified caller whose workspace does not exist is refused (403 `unknown-workspace`,
//! DESIGN.md §6c) by the [`Caller`] extractor, before a route that needs a caller runs:
//! [`KnownWorkspaces`] asks the database once per workspace and process, never per request once the
//! workspace is known.
//!
//! The subject is a ULID or a hyphenated UUID — the same 128 bits (Cognito's `sub` is a UUID: a
//! member created with that UUID as its id is that user). Behind API Gateway the subject is read from
//! the claim `ApiConfig::subject_claim` names (`CLINIC_SUBJECT_CLAIM`, default `sub`), so an identity
//! provider whose `sub` is not the member or patient id can carry the id in a claim of its own (for
//! Cognito, one a pre-token-generation trigger adds to the access token).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use axum::extract::{FromRequestParts, Request};
use axum::http::request::Parts;
use serde::{Deserialize, Serialize};
use ulid::Ulid;

use super::jwt::{self, Expected, JwtError};
use super::problem::ApiError;
use super::AppState;
use crate::AuthConfig;
use clinic_core::error::DomainError;
use clinic_core::events::Actor;
use clinic_core::ids::{parse_ulid, PatientId, WorkspaceId};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Staff,
    Admin,
    Patient,
    /// A partner system's read-only credential (issue 42): accepted only by the routes that take an
    /// [`IntegrationReader`] (reading its workspace's webhook endpoints and replaying their numbered
    /// deliveries); every other route takes a [`Caller`], which answers it 403. Deny by default, so
    /// a route added later cannot admit it by accident.
    Integration,
}

impl Role {
    pub fn parse(text: &str) -> Option<Role> {
        match text {
            "staff" => Some(Role::Staff),
            "admin" => Some(Role::Admin),
            "patient" => Some(Role::Patient),
            "integration" => Some(Role::Integration),
            _ => None,
        }
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            Role::Staff => "staff",
            Role::Admin => "admin",
            Role::Patient => "patient",
            Role::Integration => "integration",
        }
    }
}

/// Claims an upstream authorizer already verified (API Gateway's JWT authorizer), by name.
#[derive(Debug, Clone, Default)]
pub struct VerifiedClaims(pub HashMap<String, String>);

/// The authenticated caller of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    pub workspace_id: WorkspaceId,
    pub role: Role,
    /// A member id for staff and admins, the patient's own id for patients.
    pub subject: Ulid,
}

impl Caller {
    /// Builds a caller from claim values; any missing or malformed claim is unauthenticated.
    pub fn from_claims(sub: Option<&str>, workspace_id: Option<&str>, role: Option<&str>) -> Option<Caller> {
        Some(Caller {
            subject: parse_subject(sub?)?,
            workspace_id: workspace_id?.parse().ok()?,
            role: Role::parse(role?)?,
        })
    }

    pub fn actor(&self) -> Actor {
        match self.role {
            Role::Patient => Actor::Patient { id: self.subject },
            // An integration caller reaches no route that writes (see `Role::Integration`).
            Role::Staff | Role::Admin | Role::Integration => Actor::Member { id: self.subject },
        }
    }

    /// Staff and admins pass; a patient gets 403.
    pub fn require_staff(&self) -> Result<(), ApiError> {
        match self.role {
            Role::Staff | Role::Admin => Ok(()),
            Role::Patient | Role::Integration => Err(DomainError::Forbidden.into()),
        }
    }

    pub fn require_admin(&self) -> Result<(), ApiError> {
        match self.role {
            Role::Admin => Ok(()),
            Role::Staff | Role::Patient | Role::Integration => Err(DomainError::Forbidden.into()),
        }
    }

    /// The patient this caller is, when the caller is a patient.
    pub fn patient(&self) -> Option<PatientId> {
        (self.role == Role::Patient).then(|| PatientId::from_ulid(self.subject))
    }
}

/// Every route that needs a caller takes it here: 401 without one, 403 `unknown-workspace` when its
/// workspace does not exist, 403 for the read-only `integration` role (only [`IntegrationReader`]
/// routes admit it). Routes that need none (liveness, the documents) never look it up, so they never
/// touch the database.
impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = any_caller(parts, state).await?;
        if caller.role == Role::Integration {
            return Err(DomainError::Forbidden.into());
        }
        Ok(caller)
    }
}

async fn any_caller(parts: &Parts, state: &AppState) -> Result<Caller, ApiError> {
    let caller = parts.extensions.get::<Caller>().copied().ok_or(ApiError::Unauthenticated)?;
    require_known_workspace(state, caller).await?;
    Ok(caller)
}

/// The caller of a read-only integration route: an admin or the `integration` role (staff and
/// patients answer 403). Such a route reads only its caller's workspace and writes nothing.
#[derive(Debug, Clone, Copy)]
pub struct IntegrationReader(pub Caller);

impl FromRequestParts<AppState> for IntegrationReader {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = any_caller(parts, state).await?;
        match caller.role {
            Role::Admin | Role::Integration => Ok(IntegrationReader(caller)),
            Role::Staff | Role::Patient => Err(DomainError::Forbidden.into()),
        }
    }
}

/// A subject claim: a ULID, or a UUID in its hyphenated form (36 characters).
fn parse_subject(text: &str) -> Option<Ulid> {
    if text.len() == 36 {
        return uuid::Uuid::try_parse(text).ok().map(Ulid::from);
    }
    parse_ulid(text).ok()
}

/// The issuer (`iss`) of locally issued tokens; the local verifier accepts no other.
pub const LOCAL_ISSUER: &str = "clinic-local";
/// The audience (`aud`) of locally issued tokens: this API; the local verifier accepts no other.
pub const LOCAL_AUDIENCE: &str = "clinic-api";

/// The claims of a locally issued token.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TokenClaims {
    pub sub: String,
    pub workspace_id: String,
    pub role: String,
    pub iss: String,
    pub aud: String,
    pub exp: u64,
    /// Not before: optional in a token, checked when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nbf: Option<u64>,
    pub iat: u64,
}

/// Issues an HS256 token valid for `ttl` (used by `clinic token` and tests).
pub fn issue_token(
    secret: &[u8],
    workspace_id: WorkspaceId,
    sub: Ulid,
    role: Role,
    ttl: std::time::Duration,
) -> Result<String, JwtError> {
    let now = chrono::Utc::now().timestamp().max(0) as u64;
    let claims = TokenClaims {
        sub: sub.to_string(),
        workspace_id: workspace_id.to_string(),
        role: role.as_str().into(),
        iss: LOCAL_ISSUER.into(),
        aud: LOCAL_AUDIENCE.into(),
        iat: now,
        nbf: Some(now),
        exp: now + ttl.as_secs(),
    };
    jwt::sign(secret, &claims)
}

fn verify_bearer(secret: &[u8], authorization: &str) -> Option<Caller> {
    let token = authorization.strip_prefix("Bearer ")?.trim();
    let expected = Expected { issuer: LOCAL_ISSUER, audience: LOCAL_AUDIENCE };
    let claims: TokenClaims = jwt::verify(secret, token, expected, chrono::Utc::now().timestamp()).ok()?;
    Caller::from_claims(Some(&claims.sub), Some(&claims.workspace_id), Some(&claims.role))
}

/// Resolves the caller from verified claims or a bearer token and stores it in the request's
/// extensions; routes that need a caller reject the request when none was stored. A token that was
/// sent but does not verify is an error even on routes that need no caller (the caller answers 401).
/// Runs inside [`super::request::enter`], which needs the caller's workspace to decide the
/// correlation id.
pub fn identify(state: &AppState, request: &mut Request) -> Result<(), ApiError> {
    let caller = match &state.api.auth {
        AuthConfig::ApiGatewayClaims => request.extensions().get::<VerifiedClaims>().and_then(|claims| {
            Caller::from_claims(
                claims.0.get(&state.api.subject_claim).map(String::as_str),
                claims.0.get("workspace_id").map(String::as_str),
                claims.0.get("role").map(String::as_str),
            )
        }),
        AuthConfig::Hs256 { secret } => request
            .headers()
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| verify_bearer(secret, value)),
    };
    if let Some(caller) = caller {
        request.extensions_mut().insert(caller);
        Ok(())
    } else if request.headers().contains_key(axum::http::header::AUTHORIZATION) {
        Err(ApiError::Unauthenticated)
    } else {
        Ok(())
    }
}

/// The workspaces this process has seen exist. The application never deletes a workspace
/// (`clinic_app` holds no DELETE on `workspaces`), so a workspace found is remembered for the life of
/// the process: one query per workspace and process, none per request once cached. A workspace not
/// found is not remembered, so one created a moment later is accepted at once; each request naming it
/// asks again (its token had to verify first). Clones share the cache.
#[derive(Clone, Default)]
pub struct KnownWorkspaces {
    known: Arc<RwLock<HashSet<WorkspaceId>>>,
}

impl std::fmt::Debug for KnownWorkspaces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KnownWorkspaces").finish_non_exhaustive()
    }
}

/// Bounds the cache; past it the cache starts over (each workspace then costs one query again).
const MAX_KNOWN_WORKSPACES: usize = 100_000;

impl KnownWorkspaces {
    /// True when the workspace exists (from the cache, else from the database).
    pub async fn exists(&self, pool: &deadpool_postgres::Pool, id: WorkspaceId) -> Result<bool, ApiError> {
        if self.known.read().unwrap_or_else(|poisoned| poisoned.into_inner()).contains(&id) {
            return Ok(true);
        }
        let conn = pool.get().await?;
        let exists = clinic_core::workspaces::exists(&conn, id).await?;
        if exists {
            let mut known = self.known.write().unwrap_or_else(|poisoned| poisoned.into_inner());
            if known.len() >= MAX_KNOWN_WORKSPACES {
                known.clear();
            }
            known.insert(id);
        }
        Ok(exists)
    }
}

/// Refuses a caller that names a workspace that does not exist (403 `unknown-workspace`).
pub async fn require_known_workspace(state: &AppState, caller: Caller) -> Result<(), ApiError> {
    if state.api.workspaces.exists(&state.pool, caller.workspace_id).await? {
        Ok(())
    } else {
        Err(ApiError::UnknownWorkspace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifies_its_own_tokens_and_rejects_others() {
        let workspace = WorkspaceId::generate();
        let sub = Ulid::generate();
        let token =
            issue_token(b"secret-one", workspace, sub, Role::Staff, std::time::Duration::from_secs(60))
                .unwrap();
        let caller = verify_bearer(b"secret-one", &format!("Bearer {token}")).unwrap();
        assert_eq!(caller.workspace_id, workspace);
        assert_eq!(caller.role, Role::Staff);
        assert!(verify_bearer(b"secret-two", &format!("Bearer {token}")).is_none());
        assert!(verify_bearer(b"secret-one", &token).is_none());
    }

    #[test]
    fn a_subject_is_a_ulid_or_a_hyphenated_uuid() {
        let uuid = "7b2e9f34-5c1d-4a8e-9f2b-3d6c8a1e4f70";
        let from_uuid = parse_subject(uuid).expect("a UUID subject");
        assert_eq!(uuid::Uuid::from(from_uuid).to_string(), uuid);
        let ulid = Ulid::generate();
        assert_eq!(parse_subject(&ulid.to_string()), Some(ulid));
        for bad in ["7b2e9f345c1d4a8e9f2b3d6c8a1e4f70", "{7b2e9f34-5c1d-4a8e-9f2b-3d6c8a1e4f7}", "admin", ""]
        {
            assert_eq!(parse_subject(bad), None, "{bad}");
        }
        let workspace = WorkspaceId::generate().to_string();
        let caller = Caller::from_claims(Some(uuid), Some(&workspace), Some("staff")).unwrap();
        assert_eq!(caller.subject, from_uuid);
    }

    /// Issue 39 item 4: the local verifier checks `nbf`, `iss` and `aud` like the deployed one
    /// (issuer `clinic-local`, audience `clinic-api`), besides `exp`.
    #[test]
    fn checks_not_before_issuer_and_audience() {
        let now = chrono::Utc::now().timestamp();
        let sign = |claims: serde_json::Value| format!("Bearer {}", jwt::sign(b"secret", &claims).unwrap());
        let claims = |iss: Option<&str>, aud: Option<&str>, nbf: i64| {
            let mut claims = serde_json::json!({
                "sub": Ulid::generate().to_string(), "workspace_id": WorkspaceId::generate().to_string(),
                "role": "admin", "iat": now, "exp": now + 3600, "nbf": nbf,
            });
            if let Some(iss) = iss {
                claims["iss"] = iss.into();
            }
            if let Some(aud) = aud {
                claims["aud"] = aud.into();
            }
            claims
        };
        for (what, token) in [
            ("nbf a day ahead, no iss or aud", sign(claims(None, None, now + 86_400))),
            ("no iss or aud", sign(claims(None, None, now))),
            ("no aud", sign(claims(Some("clinic-local"), None, now))),
            ("nbf a day ahead", sign(claims(Some("clinic-local"), Some("clinic-api"), now + 86_400))),
            ("no iss", sign(claims(None, Some("clinic-api"), now))),
            ("another iss", sign(claims(Some("https://evil.example"), Some("clinic-api"), now))),
            ("another aud", sign(claims(Some("clinic-local"), Some("other-app"), now))),
        ] {
            assert!(verify_bearer(b"secret", &token).is_none(), "{what} must be refused");
        }
        let good = sign(claims(Some("clinic-local"), Some("clinic-api"), now));
        assert!(verify_bearer(b"secret", &good).is_some(), "a token with the local issuer and audience");
    }

    #[test]
    fn rejects_alg_none_and_expired_tokens() {
        use base64::Engine;
        let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let header = engine.encode(br#"{"alg":"none","typ":"JWT"}"#);
        let claims = engine.encode(
            format!(
                r#"{{"sub":"{}","workspace_id":"{}","role":"admin","exp":9999999999,"iat":0}}"#,
                Ulid::generate(),
                WorkspaceId::generate()
            )
            .as_bytes(),
        );
        assert!(verify_bearer(b"secret", &format!("Bearer {header}.{claims}.")).is_none());
        let expired = TokenClaims {
            sub: Ulid::generate().to_string(),
            workspace_id: WorkspaceId::generate().to_string(),
            role: "admin".into(),
            iss: LOCAL_ISSUER.into(),
            aud: LOCAL_AUDIENCE.into(),
            exp: 1_000,
            nbf: None,
            iat: 0,
        };
        let token = jwt::sign(b"secret", &expired).unwrap();
        assert!(verify_bearer(b"secret", &format!("Bearer {token}")).is_none());
    }
}
