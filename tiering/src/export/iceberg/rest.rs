//! The Iceberg REST catalog protocol (what Polaris, Nessie, Glue, S3 Tables and Iceberg's own
//! servlet speak), for tables whose files Strata writes into the export target.
//!
//! A table is created the way a filesystem table is (Strata writes `v1.metadata.json`, with
//! its own field ids, which its Parquet files carry) and then registered with the catalog
//! (`POST .../register`): a catalog's `createTable` assigns fresh field ids, which the files
//! would not match. Each commit is `POST .../tables/{table}` with the updates from the loaded
//! metadata to the staged one (new schemas, the new snapshot, the main branch, expired
//! snapshots) and two requirements: the same table (uuid) and the same current snapshot, so of
//! two committers one wins and the other gets 409 and commits again on the winner. The
//! catalog writes the metadata files after that.
//!
//! Authentication ([`CatalogAuth`]): none, a bearer token, or OAuth2 client credentials
//! (Iceberg's `credential=<client_id>:<client_secret>`, what Polaris and most managed catalogs
//! hand out): a token from the token endpoint (`<uri>/v1/oauth/tokens` unless another is
//! named), kept until shortly before it expires and fetched again once when the catalog
//! answers 401.
//!
//! Errors: a status other than the ones named here is an [`ExportError::Table`] with the
//! catalog's message; nothing is retried here (the export is re-run, and resumes).

use std::time::{Duration, Instant};

use serde_json::{json, Value as Json};

use super::{table_error, Table};
use crate::export::ExportError;

pub struct RestCatalog {
    client: reqwest::Client,
    /// `<uri>/v1[/<prefix>]`.
    base: String,
    namespace: String,
    auth: CatalogAuth,
    /// The token from the OAuth2 token endpoint, and when it expires.
    oauth: tokio::sync::Mutex<Option<(String, Option<Instant>)>>,
}

/// How Strata authenticates to a REST catalog.
#[derive(Clone, Default, PartialEq, Eq)]
pub enum CatalogAuth {
    #[default]
    None,
    /// A bearer token, sent as it is.
    Token(String),
    /// OAuth2 client credentials, exchanged at `token_uri` (default `<uri>/v1/oauth/tokens`)
    /// for a bearer token with `scope` (Iceberg's default: `catalog`).
    ClientCredentials {
        client_id: String,
        client_secret: String,
        token_uri: Option<String>,
        scope: String,
    },
}

impl std::fmt::Debug for CatalogAuth {
    // Never prints a secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CatalogAuth::None => f.write_str("None"),
            CatalogAuth::Token(_) => f.write_str("Token(..)"),
            CatalogAuth::ClientCredentials {
                client_id,
                token_uri,
                scope,
                ..
            } => f
                .debug_struct("ClientCredentials")
                .field("client_id", client_id)
                .field("token_uri", token_uri)
                .field("scope", scope)
                .finish_non_exhaustive(),
        }
    }
}

impl CatalogAuth {
    /// From Iceberg's catalog properties: `token`, or `credential` (`<client_id>:<secret>`,
    /// or a secret alone), `oauth2-server-uri` and `scope`. A credential wins over a token.
    pub fn from_properties(
        token: Option<String>,
        credential: Option<String>,
        oauth2_server_uri: Option<String>,
        scope: Option<String>,
    ) -> CatalogAuth {
        let nonempty = |v: Option<String>| v.filter(|v| !v.is_empty());
        if let Some(c) = nonempty(credential) {
            let (client_id, client_secret) = match c.split_once(':') {
                Some((id, secret)) => (id.to_string(), secret.to_string()),
                None => (String::new(), c),
            };
            return CatalogAuth::ClientCredentials {
                client_id,
                client_secret,
                token_uri: nonempty(oauth2_server_uri),
                scope: nonempty(scope).unwrap_or_else(|| "catalog".to_string()),
            };
        }
        nonempty(token).map_or(CatalogAuth::None, CatalogAuth::Token)
    }
}

/// A token is fetched again this long before it expires.
const TOKEN_REFRESH_MARGIN: Duration = Duration::from_secs(60);

/// Percent-encodes one path segment (Kafka topic names need none of it, namespaces may).
fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

impl RestCatalog {
    /// A catalog at `uri` (e.g. `http://127.0.0.1:8181`), tables in `namespace`; asks the
    /// catalog's config for its path prefix.
    pub async fn connect(
        uri: &str,
        namespace: &str,
        auth: CatalogAuth,
    ) -> Result<RestCatalog, ExportError> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| table_error(format!("REST catalog client: {e}")))?;
        let root = uri.trim_end_matches('/').to_string();
        let mut catalog = RestCatalog {
            client,
            base: format!("{root}/v1"),
            namespace: namespace.to_string(),
            auth,
            oauth: tokio::sync::Mutex::new(None),
        };
        let (status, config) = catalog.call(reqwest::Method::GET, "config", None).await?;
        if status != 200 {
            return Err(rest_error("GET config", status, &config));
        }
        if let Some(prefix) = config
            .pointer("/overrides/prefix")
            .or_else(|| config.pointer("/defaults/prefix"))
            .and_then(Json::as_str)
        {
            catalog.base = format!("{root}/v1/{}", segment(prefix));
        }
        Ok(catalog)
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Json>,
    ) -> Result<(u16, Json), ExportError> {
        let token = self.bearer(false).await?;
        let (status, json) = self.send(&method, path, body, token.as_deref()).await?;
        if status == 401 && matches!(self.auth, CatalogAuth::ClientCredentials { .. }) {
            // Revoked or expired early: one new token, one more try.
            let token = self.bearer(true).await?;
            return self.send(&method, path, body, token.as_deref()).await;
        }
        Ok((status, json))
    }

    async fn send(
        &self,
        method: &reqwest::Method,
        path: &str,
        body: Option<&Json>,
        token: Option<&str>,
    ) -> Result<(u16, Json), ExportError> {
        let url = format!("{}/{path}", self.base);
        let mut req = self.client.request(method.clone(), &url);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let resp = req
            .send()
            .await
            .map_err(|e| table_error(format!("{method} {url}: {e}")))?;
        read_json(resp, &format!("{method} {url}")).await
    }

    /// The bearer token to send: the configured one, or one from the OAuth2 token endpoint
    /// (fetched when there is none, it is about to expire, or `renew`).
    async fn bearer(&self, renew: bool) -> Result<Option<String>, ExportError> {
        let CatalogAuth::ClientCredentials {
            client_id,
            client_secret,
            token_uri,
            scope,
        } = &self.auth
        else {
            return Ok(match &self.auth {
                CatalogAuth::Token(t) => Some(t.clone()),
                _ => None,
            });
        };
        let mut cached = self.oauth.lock().await;
        if let Some((token, expires)) = cached.as_ref() {
            let fresh = expires.is_none_or(|e| Instant::now() + TOKEN_REFRESH_MARGIN < e);
            if fresh && !renew {
                return Ok(Some(token.clone()));
            }
        }
        let uri = token_uri.clone().unwrap_or_else(|| {
            // The token endpoint is not under a catalog prefix.
            let root = self.base.split("/v1").next().unwrap_or(&self.base);
            format!("{root}/v1/oauth/tokens")
        });
        let form = {
            let mut form = url::form_urlencoded::Serializer::new(String::new());
            form.append_pair("grant_type", "client_credentials");
            if !client_id.is_empty() {
                form.append_pair("client_id", client_id);
            }
            form.append_pair("client_secret", client_secret);
            form.append_pair("scope", scope);
            form.finish()
        };
        let resp = self
            .client
            .post(&uri)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form)
            .send()
            .await
            .map_err(|e| table_error(format!("POST {uri}: {e}")))?;
        let (status, body) = read_json(resp, &format!("POST {uri}")).await?;
        let token = body.get("access_token").and_then(Json::as_str);
        let (200, Some(token)) = (status, token) else {
            // OAuth2 errors are {"error", "error_description"}; never echo the secret.
            let why = [body.get("error"), body.get("error_description")]
                .into_iter()
                .flatten()
                .filter_map(Json::as_str)
                .collect::<Vec<_>>()
                .join(": ");
            return Err(table_error(format!(
                "REST catalog: the OAuth2 token endpoint {uri} answered {status}: {why}"
            )));
        };
        let expires = body
            .get("expires_in")
            .and_then(Json::as_u64)
            .map(|s| Instant::now() + Duration::from_secs(s));
        *cached = Some((token.to_string(), expires));
        Ok(Some(token.to_string()))
    }

    fn table_path(&self, table: &str) -> String {
        format!(
            "namespaces/{}/tables/{}",
            segment(&self.namespace),
            segment(table)
        )
    }

    /// The table, or `None` when the catalog has none by that name.
    pub async fn load(&self, table: &str) -> Result<Option<Table>, ExportError> {
        let path = self.table_path(table);
        match self.call(reqwest::Method::GET, &path, None).await? {
            (200, body) => loaded(body).map(Some),
            (404, _) => Ok(None),
            (status, body) => Err(rest_error(&format!("GET {path}"), status, &body)),
        }
    }

    /// Registers the metadata file at `metadata_location` as `table` (creating the namespace
    /// if needed); `None` when another registration of that name won.
    pub async fn register(
        &self,
        table: &str,
        metadata_location: &str,
    ) -> Result<Option<Table>, ExportError> {
        let body = json!({"namespace": [self.namespace], "properties": {}});
        match self
            .call(reqwest::Method::POST, "namespaces", Some(&body))
            .await?
        {
            (200 | 409, _) => {}
            (status, body) => return Err(rest_error("POST namespaces", status, &body)),
        }
        let path = format!("namespaces/{}/register", segment(&self.namespace));
        let body = json!({"name": table, "metadata-location": metadata_location});
        match self.call(reqwest::Method::POST, &path, Some(&body)).await? {
            (200, body) => loaded(body).map(Some),
            (409, _) => Ok(None),
            (status, body) => Err(rest_error(&format!("POST {path}"), status, &body)),
        }
    }

    /// Commits the change from `base` to `staged` (see [`updates`]); `None` when the table
    /// changed since `base` was loaded.
    pub async fn commit(
        &self,
        table: &str,
        base: &Table,
        staged: &Json,
    ) -> Result<Option<Table>, ExportError> {
        let current = base
            .metadata
            .get("current-snapshot-id")
            .and_then(Json::as_i64);
        let body = json!({
            "requirements": [
                {"type": "assert-table-uuid", "uuid": base.metadata.get("table-uuid")},
                {"type": "assert-ref-snapshot-id", "ref": "main",
                 "snapshot-id": current.filter(|&id| id >= 0)},
            ],
            "updates": updates(&base.metadata, staged),
        });
        let path = self.table_path(table);
        match self.call(reqwest::Method::POST, &path, Some(&body)).await? {
            (200, body) => loaded(body).map(Some),
            (409, _) => Ok(None),
            (status, body) => Err(rest_error(&format!("POST {path}"), status, &body)),
        }
    }
}

/// The status and the JSON body of a response (a body that is not JSON becomes an error
/// message; an empty one `null`). Bodies are bounded: a catalog answer is metadata, not data.
async fn read_json(resp: reqwest::Response, what: &str) -> Result<(u16, Json), ExportError> {
    const MAX_BODY_BYTES: usize = 64 << 20;
    let status = resp.status().as_u16();
    let mut resp = resp;
    let mut bytes = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| table_error(format!("{what}: {e}")))?
    {
        if bytes.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(table_error(format!(
                "{what}: the answer is larger than {MAX_BODY_BYTES} bytes"
            )));
        }
        bytes.extend_from_slice(&chunk);
    }
    let json = if bytes.is_empty() {
        Json::Null
    } else {
        serde_json::from_slice(&bytes).unwrap_or_else(
            |_| json!({"error": {"message": String::from_utf8_lossy(&bytes).to_string()}}),
        )
    };
    Ok((status, json))
}

fn rest_error(what: &str, status: u16, body: &Json) -> ExportError {
    let message = body
        .pointer("/error/message")
        .and_then(Json::as_str)
        .unwrap_or("");
    table_error(format!("REST catalog: {what} answered {status}: {message}"))
}

/// A LoadTableResult as a [`Table`].
fn loaded(body: Json) -> Result<Table, ExportError> {
    let location = body
        .get("metadata-location")
        .and_then(Json::as_str)
        .map(str::to_string);
    let metadata = body
        .get("metadata")
        .cloned()
        .ok_or_else(|| table_error("REST catalog: a table without metadata"))?;
    Ok(Table {
        version: 0,
        metadata,
        location,
    })
}

/// The REST updates that turn metadata `base` into `staged`: schemas added (and the current
/// one), snapshots added (and the main branch moved to the current one), snapshots removed.
pub fn updates(base: &Json, staged: &Json) -> Vec<Json> {
    let ids = |m: &Json, list: &str, id: &str| -> Vec<i64> {
        m.get(list)
            .and_then(Json::as_array)
            .map(|a| a.iter().filter_map(|x| x.get(id)?.as_i64()).collect())
            .unwrap_or_default()
    };
    let mut out = Vec::new();
    let base_schemas = ids(base, "schemas", "schema-id");
    let last_column_id = staged.get("last-column-id").cloned().unwrap_or(json!(0));
    for s in staged
        .get("schemas")
        .and_then(Json::as_array)
        .into_iter()
        .flatten()
    {
        let id = s.get("schema-id").and_then(Json::as_i64).unwrap_or(-1);
        if !base_schemas.contains(&id) {
            out.push(json!({"action": "add-schema", "schema": s,
                             "last-column-id": last_column_id}));
        }
    }
    if staged.get("current-schema-id") != base.get("current-schema-id") {
        out.push(json!({"action": "set-current-schema",
                         "schema-id": staged.get("current-schema-id")}));
    }
    let base_snapshots = ids(base, "snapshots", "snapshot-id");
    for s in staged
        .get("snapshots")
        .and_then(Json::as_array)
        .into_iter()
        .flatten()
    {
        let id = s.get("snapshot-id").and_then(Json::as_i64).unwrap_or(-1);
        if !base_snapshots.contains(&id) {
            out.push(json!({"action": "add-snapshot", "snapshot": s}));
        }
    }
    let current = staged.get("current-snapshot-id").and_then(Json::as_i64);
    if let Some(id) = current
        .filter(|&id| id >= 0 && Some(id) != base.get("current-snapshot-id").and_then(Json::as_i64))
    {
        out.push(
            json!({"action": "set-snapshot-ref", "ref-name": "main", "type": "branch",
                         "snapshot-id": id}),
        );
    }
    let staged_snapshots = ids(staged, "snapshots", "snapshot-id");
    let removed: Vec<i64> = base_snapshots
        .into_iter()
        .filter(|id| !staged_snapshots.contains(id))
        .collect();
    if !removed.is_empty() {
        out.push(json!({"action": "remove-snapshots", "snapshot-ids": removed}));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn updates_name_the_new_schema_snapshot_branch_and_expired_snapshots() {
        let base = json!({
            "current-schema-id": 0, "schemas": [{"schema-id": 0}],
            "current-snapshot-id": 2, "snapshots": [{"snapshot-id": 1}, {"snapshot-id": 2}],
        });
        let staged = json!({
            "last-column-id": 15,
            "current-schema-id": 1, "schemas": [{"schema-id": 0}, {"schema-id": 1}],
            "current-snapshot-id": 3, "snapshots": [{"snapshot-id": 2}, {"snapshot-id": 3}],
        });
        let u = updates(&base, &staged);
        let actions: Vec<&str> = u.iter().map(|x| x["action"].as_str().unwrap()).collect();
        assert_eq!(
            actions,
            [
                "add-schema",
                "set-current-schema",
                "add-snapshot",
                "set-snapshot-ref",
                "remove-snapshots"
            ]
        );
        assert_eq!(u[0]["last-column-id"], 15);
        assert_eq!(u[3]["snapshot-id"], 3);
        assert_eq!(u[4]["snapshot-ids"], json!([1]));
        assert!(updates(&staged, &staged).is_empty());
    }

    #[test]
    fn a_credential_is_split_into_client_id_and_secret_and_wins_over_a_token() {
        let a = CatalogAuth::from_properties(
            Some("t".into()),
            Some("strata:s3cr:et".into()),
            None,
            None,
        );
        assert_eq!(
            a,
            CatalogAuth::ClientCredentials {
                client_id: "strata".into(),
                client_secret: "s3cr:et".into(),
                token_uri: None,
                scope: "catalog".into(),
            }
        );
        assert!(!format!("{a:?}").contains("s3cr"), "Debug hides the secret");
        assert_eq!(
            CatalogAuth::from_properties(Some("t".into()), Some(String::new()), None, None),
            CatalogAuth::Token("t".into())
        );
        assert_eq!(
            CatalogAuth::from_properties(None, None, None, None),
            CatalogAuth::None
        );
    }

    #[test]
    fn path_segments_are_percent_encoded() {
        assert_eq!(segment("orders.v1-x_y~"), "orders.v1-x_y~");
        assert_eq!(segment("a b/c"), "a%20b%2Fc");
    }
}
