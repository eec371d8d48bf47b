//! HPACK: the copied decoder against RFC 7541 Appendix C (C.3 and C.4
//! requests, with and without Huffman; C.5 responses through a 256-byte
//! table, so eviction is exercised), and our encoder's output decoding back
//! to the same list for any header list (property test).

use proptest::prelude::*;
use sluice_h2::hpack::{encode, encode_size_update, Decoder, DecoderError, Field};

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn decode(d: &mut Decoder, block: &[u8]) -> Result<Vec<Field>, DecoderError> {
    let mut v = Vec::new();
    d.decode(block, usize::MAX, |n, val| v.push((n.to_vec(), val.to_vec())))?;
    Ok(v)
}

fn fields(list: &[(&str, &str)]) -> Vec<Field> {
    list.iter().map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec())).collect()
}

fn requests(blocks: [&str; 3]) {
    let mut d = Decoder::new(4096);
    let first = [(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "www.example.com")];
    assert_eq!(decode(&mut d, &hex(blocks[0])).unwrap(), fields(&first));
    assert_eq!(d.table_size(), 57);
    let mut second = first.to_vec();
    second.push(("cache-control", "no-cache"));
    assert_eq!(decode(&mut d, &hex(blocks[1])).unwrap(), fields(&second));
    assert_eq!(d.table_size(), 110);
    let third = [
        (":method", "GET"),
        (":scheme", "https"),
        (":path", "/index.html"),
        (":authority", "www.example.com"),
        ("custom-key", "custom-value"),
    ];
    assert_eq!(decode(&mut d, &hex(blocks[2])).unwrap(), fields(&third));
    assert_eq!(d.table_size(), 164);
}

#[test]
fn rfc7541_c3_requests_without_huffman() {
    requests([
        "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
        "8286 84be 5808 6e6f 2d63 6163 6865",
        "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
    ]);
}

#[test]
fn rfc7541_c4_requests_with_huffman() {
    requests([
        "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
        "8286 84be 5886 a8eb 1064 9cbf",
        "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
    ]);
}

#[test]
fn rfc7541_c5_responses_with_eviction() {
    let mut d = Decoder::new(256);
    let b1 = "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 \
              3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 6c65 2e63 6f6d";
    let r1 = [
        (":status", "302"),
        ("cache-control", "private"),
        ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
        ("location", "https://www.example.com"),
    ];
    assert_eq!(decode(&mut d, &hex(b1)).unwrap(), fields(&r1));
    assert_eq!(d.table_size(), 222);
    let mut r2 = r1.to_vec();
    r2[0] = (":status", "307");
    assert_eq!(decode(&mut d, &hex("4803 3330 37c1 c0bf")).unwrap(), fields(&r2));
    assert_eq!(d.table_size(), 222);
    let b3 = "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d 54c0 5a04 677a 6970 \
              7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049 5541 5851 5745 4f49 553b 206d 6178 2d61 \
              6765 3d33 3630 303b 2076 6572 7369 6f6e 3d31";
    let r3 = [
        (":status", "200"),
        ("cache-control", "private"),
        ("date", "Mon, 21 Oct 2013 20:13:22 GMT"),
        ("location", "https://www.example.com"),
        ("content-encoding", "gzip"),
        ("set-cookie", "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"),
    ];
    assert_eq!(decode(&mut d, &hex(b3)).unwrap(), fields(&r3));
    assert_eq!(d.table_size(), 215);
}

#[test]
fn list_bound_keeps_the_table_in_step() {
    // A literal with indexing of ~100 bytes, then referenced 50 times: the
    // list bound stops keeping fields but the table still gets the entry.
    let mut block = vec![0x40, 1, b'x', 100];
    block.extend_from_slice(&[b'v'; 100]);
    block.extend_from_slice(&[0x80 | 62; 50]);
    let mut d = Decoder::new(4096);
    let mut kept = 0;
    assert_eq!(d.decode(&block, 1000, |_, _| kept += 1), Err(DecoderError::ListTooLarge));
    assert_eq!(kept, 7); // 7 * 133 = 931 <= 1000 < 8 * 133
    assert_eq!(d.table_size(), 133);
    assert_eq!(decode(&mut d, &[0x80 | 62]).unwrap().len(), 1);
}

fn field() -> impl Strategy<Value = Field> {
    let names = prop_oneof![
        Just(b":status".to_vec()),
        Just(b"content-type".to_vec()),
        Just(b"accept-encoding".to_vec()),
        Just(b"set-cookie".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..40),
    ];
    let values = prop_oneof![
        Just(b"200".to_vec()),
        Just(b"gzip, deflate".to_vec()),
        Just(Vec::new()),
        proptest::collection::vec(any::<u8>(), 0..300),
    ];
    (names, values)
}

proptest! {
    #[test]
    fn our_encoding_decodes_back(list in proptest::collection::vec(field(), 0..30), update in any::<bool>()) {
        let mut block = Vec::new();
        if update {
            encode_size_update(&mut block, 0);
        }
        encode(&mut block, list.iter().map(|(n, v)| (n.as_slice(), v.as_slice())));
        let mut d = Decoder::new(4096);
        prop_assert_eq!(decode(&mut d, &block).unwrap(), list);
        // Stateless: nothing entered the decoder's table.
        prop_assert_eq!(d.table_size(), 0);
    }
}
