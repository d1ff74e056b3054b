//! The SSRF allowlist at save (issue 39 item 5): a webhook address that hides an internal IPv4
//! address in an IPv6 form, or names a special-purpose IPv6 block, answers 422 naming `url` and
//! stores nothing.

use clinic_testkit::app::TestApp;
use serde_json::json;

#[tokio::test]
async fn webhook_addresses_that_are_not_global_unicast_are_refused_at_save() {
    let app = TestApp::new().await;
    let admin = app.workspace.admin.clone();
    for url in [
        "https://[::ffff:0:a9fe:a9fe]/",
        "https://[::ffff:0:7f00:1]/hook",
        "https://[64:ff9b:1::a9fe:a9fe]/",
        "https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",
        "https://[100::1]/",
    ] {
        let refused =
            app.call("POST", "/v1/webhooks/endpoints", Some(&admin), Some(json!({"url": url}))).await;
        assert_eq!(refused.status, 422, "{url}: {}", refused.text);
        assert_eq!(refused.body["field"], "url", "{}", refused.text);
    }
    assert_eq!(app.count("SELECT 1 FROM webhook_endpoints").await, 0);
}
