//! Web Polygraph objects (`/pg/…` URLs): size, type and cachability from the URL, validators
//! from the life cycle, the server think time.

use crate::common;

use common::*;

#[tokio::test]
async fn polygraph_urls_get_their_size_cache_control_and_think_time() {
    let mut c = config();
    c.polygraph_think = capstan_workload::Dist::Const { value: 0.2 };
    c.polygraph_think_scale = 0.5;
    let node = start(c).await;
    let a = node.addr();
    let cached = get(a, "/pg/w1/img/17_4608_c.gif").await;
    assert_eq!(cached.status, 200);
    assert_eq!(cached.body.len(), 4608);
    assert_eq!(cached.header("content-type"), Some("image/gif"));
    let cc = cached.header("cache-control").unwrap();
    assert!(cc.starts_with("public, max-age="), "{cc}");
    assert!(cached.header("last-modified").is_some() && cached.header("expires").is_some());
    // 0.2 s × 0.5 of think time.
    assert!(ms(cached.elapsed) >= 99.0, "{:?}", cached.elapsed);
    let again = get(a, "/pg/w1/img/17_4608_c.gif").await;
    assert_eq!(again.body, cached.body);
    assert_eq!(again.header("etag"), cached.header("etag"));
    let etag = cached.header("etag").unwrap().to_string();
    let revalidated = request(
        a,
        "GET",
        "/pg/w1/img/17_4608_c.gif",
        &[("If-None-Match", &etag)],
    )
    .await;
    assert_eq!(revalidated.status, 304);
    let private = get(a, "/pg/w1/other/18_30000_u.bin").await;
    assert_eq!(private.body.len(), 30_000);
    assert_eq!(private.header("cache-control"), Some("no-store"));
    for bad in [
        "/pg/w1/img/17_4608.gif",
        "/pg/w1/img/x_1_c.gif",
        "/pg/nothing",
    ] {
        let r = get(a, bad).await;
        assert_eq!(r.status, 404, "{bad}");
        assert!(String::from_utf8_lossy(&r.body).contains("expected") || r.body.len() > 5);
    }
    node.shutdown().await;
}
