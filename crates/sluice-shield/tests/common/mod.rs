//! What the shield's kernel tests share.

use sluice_live::LiveError;
use sluice_rules::parse_rules;
use sluice_shield::{Compiled, Options, ShieldError};

/// Whether programs load here. An empty rule file: if even that cannot be
/// loaded, we lack the rights (a failure under `SLUICE_REQUIRE_LIVE=1`, as
/// in CI). The verifier refusing one is a bug of ours, never a skip.
pub fn can_load() -> bool {
    let file = parse_rules("probe", "", std::path::Path::new(".")).unwrap();
    match Compiled::new(&file, &[], &Options::default()) {
        Ok(_) => true,
        Err(e @ ShieldError::Kernel(LiveError::XdpRefused { .. })) => panic!("{e}"),
        Err(e) => {
            assert!(std::env::var_os("SLUICE_REQUIRE_LIVE").is_none(), "SLUICE_REQUIRE_LIVE=1 but: {e}");
            eprintln!("SKIPPED: cannot load BPF programs here: {e}");
            false
        }
    }
}
