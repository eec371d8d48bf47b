//! `http-serve` and `http-load` through their libraries alone, as products
//! of the one shape (`start`, `Running::{handle, wait}`, a `Summary`):
//! the load's count of answers equals the server's count of requests.

use sluice_control::product::{self, Running, Summary};
use sluice_httpbed::{load, Config, Server};
use std::time::Duration;

#[test]
fn serve_and_load_run_as_products_and_agree_on_the_count() {
    let server = Server::bind(Config::new("127.0.0.1:0".parse().unwrap())).unwrap();
    let addr = server.local_addr();
    let serving = server.start().unwrap();
    let mut c = load::LoadConfig::new(addr, "bed.test".into(), "/".into());
    c.requests = Some(300);
    c.connections = 3;
    c.timeout = Duration::from_secs(10);
    let loading = load::start(c).unwrap();
    // It ends by itself after 300 requests; run_to_end sees that.
    let (report, _) = product::run_to_end(loading, Some(Duration::from_secs(60)), false).unwrap();
    assert_eq!((report.requests, report.errors.total()), (300, 0), "{}", report.text());
    assert_eq!(report.json()["requests"], 300);
    let handle = serving.handle();
    assert!(!serving.finished(), "a server serves until told");
    handle.stop();
    let summary = serving.wait().unwrap();
    assert_eq!(summary.report.requests, 300, "{}", Summary::text(&summary));
    assert!(Summary::text(&summary).starts_with("300 requests in "), "{}", Summary::text(&summary));
    assert_eq!(product::print(&summary, true).trim_end(), summary.json().to_string());
}
