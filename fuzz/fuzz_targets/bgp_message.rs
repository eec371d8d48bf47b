//! A BGP peer's bytes: framed as the session frames them, each message
//! decodes or is a session error with the NOTIFICATION to send, never a
//! panic; an UPDATE that treats its routes as withdrawn announces nothing.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_bgp::message::{decode, frame_len, Message};

fuzz_target!(|data: &[u8]| {
    let as4 = data.first().is_some_and(|b| b & 1 == 1);
    let mut buf = data.get(1..).unwrap_or_default();
    while let Ok(Some(n)) = frame_len(buf) {
        let Some(m) = buf.get(..n) else { break };
        if let Ok(Message::Update(u)) = decode(m, as4) {
            if u.treat_as_withdraw.is_some() {
                assert!(u.announced.is_empty() && u.flows_announced.is_empty());
            }
        }
        buf = &buf[n..];
    }
});
