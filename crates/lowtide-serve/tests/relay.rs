//! Relay chains over loopback: an origin with a live x264 source, an edge that pulls the
//! stream with `--upstream` and serves it again; a viewer on each. The edge's viewer gets the
//! stream whole and decodable, ended when the origin's ends; what the hop adds is printed per
//! unit (matched by capture stamp). And the pulls an origin must refuse.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use lowtide::ChannelConfig;
use lowtide_serve::client::{self, WatchOptions};
use lowtide_serve::relay::{self, PullError, Upstream};
use lowtide_serve::source;
use lowtide_serve::{ServeConfig, Server};

fn origin_config() -> ServeConfig {
    ServeConfig {
        http: common::loopback(),
        ingest: common::loopback(),
        publish_token: "pub".into(),
        relay_token: "relay".into(),
        ..ServeConfig::default()
    }
}

#[tokio::test(flavor = "current_thread")]
async fn an_edge_serves_the_origins_stream_whole_and_decodable() {
    let origin = Server::start(origin_config()).await.unwrap();
    // 6 s of live 640x360 video.
    let cmd = source::test_pattern_command(640, 360, 1000, Some(180));
    let hub = origin.hub().clone();
    let src = tokio::spawn(async move { source::run(hub, "cam", &cmd).await });
    common::wait_for_stream(&origin, "cam", Duration::from_secs(10)).await;
    let edge = Server::start(ServeConfig {
        http: common::loopback(),
        ingest: common::loopback(),
        upstreams: vec![Upstream {
            addr: origin.ingest_addr(),
            path: "cam".into(),
            token: "relay".into(),
        }],
        ..ServeConfig::default()
    })
    .await
    .unwrap();
    common::wait_for_stream(&edge, "cam", Duration::from_secs(10)).await;
    let opts = WatchOptions {
        duration: Duration::from_secs(30),
        ..WatchOptions::default()
    };
    let (at_origin, at_edge) = tokio::join!(
        client::watch(origin.http_addr(), "cam", opts),
        client::watch(edge.http_addr(), "cam", opts)
    );
    src.await.unwrap().expect("the source ran to its end");
    let (at_origin, at_edge) = (at_origin.unwrap(), at_edge.unwrap());
    assert!(at_edge.ended, "the origin's end reaches the edge's viewer");
    assert_eq!(at_edge.undecodable(), 0, "every unit's references arrived");
    assert_eq!(at_edge.dropped, [0; 4], "nothing dropped over loopback");
    let pictures = |r: &client::WatchReport| {
        r.units
            .iter()
            .filter(|u| u.kind != lowtide_media::encoded::FrameKind::ParameterSets)
            .count()
    };
    // Both joined within the first second or two: at most a group of pictures (30) missed.
    assert!(pictures(&at_edge) >= 120, "{} of 180", pictures(&at_edge));
    // What the hop adds: the same picture (by its capture stamp) at the edge's viewer against
    // the origin's, live units only (the catch-up is old by nature).
    let at_origin: HashMap<u64, u64> = at_origin
        .units
        .iter()
        .filter(|u| u.capture_us != 0 && !u.catch_up)
        .map(|u| (u.capture_us, u.received_us))
        .collect();
    let hop: Vec<i64> = at_edge
        .units
        .iter()
        .filter(|u| !u.catch_up)
        .filter_map(|u| {
            let o = at_origin.get(&u.capture_us)?;
            Some(u.received_us as i64 - *o as i64)
        })
        .collect();
    assert!(hop.len() >= 100, "{} pictures seen at both", hop.len());
    let mut sorted = hop.clone();
    sorted.sort_unstable();
    let q = |q| lowtide::proto::quantile::of_sorted(&sorted, q).expect("samples");
    let (p50, p99) = (q(0.5), q(0.99));
    println!(
        "relay-hop: {} pictures, the edge's viewer later than the origin's by p50 {:.2} ms, p99 {:.2} ms",
        hop.len(),
        p50 as f64 / 1e3,
        p99 as f64 / 1e3
    );
    // Functional bound with room for a loaded 2-core machine; the hop's cost is the number
    // printed above (docs/serve.md, "Relays").
    assert!(p99 < 200_000, "the hop adds {p99} µs at p99");
    let metrics = origin.metrics();
    assert!(
        metrics.contains("lowtide_serve_viewers_accepted_total 1"),
        "the relay is not a WebSocket viewer: {metrics}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn an_origin_refuses_a_wrong_relay_token_and_an_unpublished_path() {
    let origin = Server::start(origin_config()).await.unwrap();
    let cmd = source::test_pattern_command(320, 180, 300, Some(300));
    let hub = origin.hub().clone();
    let src = tokio::spawn(async move { source::run(hub, "cam", &cmd).await });
    common::wait_for_stream(&origin, "cam", Duration::from_secs(10)).await;
    let edge_hub = lowtide_serve::hub::Hub::new(Default::default());
    let pull = |path: &str, token: &str| Upstream {
        addr: origin.ingest_addr(),
        path: path.into(),
        token: token.into(),
    };
    let e = relay::pull_once(&pull("cam", "wrong"), &edge_hub, &ChannelConfig::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&e, PullError::Refused(why) if why.contains("wrong relay token")),
        "{e}"
    );
    let e = relay::pull_once(
        &pull("nobody", "relay"),
        &edge_hub,
        &ChannelConfig::default(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&e, PullError::Refused(why) if why.contains("no stream is published at \"nobody\"")),
        "{e}"
    );
    assert!(edge_hub.list().is_empty(), "nothing published on a refusal");
    src.abort();
}

#[test]
fn upstream_urls_name_what_is_wrong() {
    for (url, why) in [
        ("http://127.0.0.1:7000/cam", "not a lowtide:// URL"),
        ("lowtide://127.0.0.1:7000", "no stream path"),
        ("lowtide://127.0.0.1:7000/a/../b", "segment"),
        ("lowtide://127.0.0.1/cam", "127.0.0.1"),
    ] {
        let e = Upstream::parse(url, "").unwrap_err();
        assert!(e.to_string().contains(why), "{url}: {e}");
        assert!(
            e.to_string().contains("expected lowtide://HOST:PORT/PATH"),
            "{e}"
        );
    }
}
