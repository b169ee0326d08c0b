//! `GET /api/v1/openapi.json` with and without `[auth]`: served without
//! credentials, the same document either way, naming nothing of the server
//! (docs/api.md, "OpenAPI"). What the document says is checked against the
//! served routes and answers in tests/it/openapi.rs.

use super::{Server, FLEET, SOURCE};

#[tokio::test]
async fn the_document_is_served_without_credentials_and_names_nothing_of_the_server() {
    let open = Server::start(false).await;
    let authed = Server::start(true).await;
    // docs/api.md: "The document is served to anyone, without credentials,
    // also with `[auth]` configured"
    let doc = authed.send("GET", "/api/v1/openapi.json", &[], "").await;
    assert_eq!(doc.status, 200, "{}", doc.body);
    let parsed: serde_json::Value = serde_json::from_str(&doc.body).unwrap();
    assert!(
        parsed["openapi"].as_str().unwrap().starts_with("3.1"),
        "{}",
        parsed["openapi"]
    );
    // "The API it describes still checks every call."
    let fleets = authed.send("GET", "/api/v1/fleets", &[], "").await;
    assert_eq!(fleets.status, 401, "{}", fleets.body);
    // "it is the same on every server of a version and names nothing of this
    // one (no fleet, store, user or setting)"
    let other = open.send("GET", "/api/v1/openapi.json", &[], "").await;
    assert_eq!(other.status, 200);
    assert_eq!(other.body, doc.body, "the document differs between two servers");
    let token_ids = authed.tokens.values().map(|t| t.split('.').next().unwrap().to_string());
    let secrets = [FLEET, SOURCE, "secret-store-endpoint", "X-Forwarded-User", "bob"]
        .map(String::from)
        .into_iter()
        .chain(token_ids);
    for secret in secrets {
        assert!(!doc.body.contains(&secret), "the document names {secret:?}");
    }
}
