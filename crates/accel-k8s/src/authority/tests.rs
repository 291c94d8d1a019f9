//! The rewriter on byte streams a client's HPACK encoder (with its dynamic table)
//! produced, checked by decoding its output with a decoder that starts empty, as h2's
//! does, and must stay empty.

use super::*;

const AUTHORITY: &[u8] = b"%2Fvar%2Flib%2Fkubelet%2Fplugins_registry%2Faccel.dev-reg.sock";
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

type Fields = Vec<(Vec<u8>, Vec<u8>)>;

fn request(authority: &[u8], extra: &[(&[u8], &[u8])]) -> Fields {
    let mut f: Fields = vec![
        (b":method".to_vec(), b"POST".to_vec()),
        (b":scheme".to_vec(), b"http".to_vec()),
        (
            b":path".to_vec(),
            b"/pluginregistration.Registration/GetInfo".to_vec(),
        ),
        (b":authority".to_vec(), authority.to_vec()),
        (b"content-type".to_vec(), b"application/grpc".to_vec()),
        (b"te".to_vec(), b"trailers".to_vec()),
    ];
    f.extend(extra.iter().map(|(n, v)| (n.to_vec(), v.to_vec())));
    f
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.push(kind);
    f.push(flags);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A header block as HEADERS + CONTINUATIONs of at most `chunk` bytes.
fn header_frames(stream: u32, block: &[u8], chunk: usize, end_stream: bool) -> Vec<u8> {
    let pieces: Vec<&[u8]> = block.chunks(chunk).collect();
    let mut out = Vec::new();
    for (i, p) in pieces.iter().enumerate() {
        let last = i + 1 == pieces.len();
        let mut flags = if last { END_HEADERS } else { 0 };
        if i == 0 && end_stream {
            flags |= END_STREAM;
        }
        out.extend(frame(
            if i == 0 { HEADERS } else { CONTINUATION },
            flags,
            stream,
            p,
        ));
    }
    out
}

/// Parses what the rewriter wrote: the frames, header blocks decoded by a decoder
/// that must never need a dynamic table.
struct Server {
    decoder: loona_hpack::Decoder<'static>,
}

#[derive(Debug, PartialEq)]
enum Seen {
    Headers {
        stream: u32,
        end_stream: bool,
        fields: Fields,
    },
    Other(u8, Vec<u8>),
}

impl Server {
    fn new() -> Self {
        let mut decoder = loona_hpack::Decoder::new();
        // h2 would allow a table; none is needed, so none is given.
        decoder.set_max_table_size(0);
        Server { decoder }
    }

    fn read(&mut self, mut bytes: &[u8]) -> Vec<Seen> {
        assert_eq!(&bytes[..PREFACE.len()], PREFACE);
        bytes = &bytes[PREFACE.len()..];
        let mut seen = Vec::new();
        let mut open: Option<(u32, bool, Vec<u8>)> = None;
        while !bytes.is_empty() {
            let len = u32::from_be_bytes([0, bytes[0], bytes[1], bytes[2]]) as usize;
            assert!(len <= MAX_FRAME, "a frame of {len} bytes");
            let (kind, flags) = (bytes[3], bytes[4]);
            let stream = u32::from_be_bytes(bytes[5..9].try_into().unwrap());
            let payload = &bytes[9..9 + len];
            bytes = &bytes[9 + len..];
            match kind {
                HEADERS => {
                    assert!(open.is_none());
                    assert_eq!(flags & PADDED, 0, "padding is removed");
                    let p = if flags & PRIORITY != 0 {
                        &payload[5..]
                    } else {
                        payload
                    };
                    open = Some((stream, flags & END_STREAM != 0, p.to_vec()));
                }
                CONTINUATION => {
                    let o = open.as_mut().expect("a CONTINUATION inside a block");
                    assert_eq!(o.0, stream);
                    o.2.extend_from_slice(payload);
                }
                k => {
                    assert!(open.is_none());
                    seen.push(Seen::Other(k, payload.to_vec()));
                    continue;
                }
            }
            if flags & END_HEADERS != 0 {
                let (stream, end_stream, block) = open.take().unwrap();
                // Only literals without indexing, new names.
                let fields = self.decoder.decode(&block).expect("h2 can decode it");
                seen.push(Seen::Headers {
                    stream,
                    end_stream,
                    fields,
                });
            }
        }
        seen
    }
}

fn with_authority(fields: &Fields, authority: &[u8]) -> Fields {
    fields
        .iter()
        .map(|(n, v)| {
            if n == b":authority" {
                (n.clone(), authority.to_vec())
            } else {
                (n.clone(), v.clone())
            }
        })
        .collect()
}

fn encode(enc: &mut loona_hpack::Encoder<'_>, fields: &Fields) -> Vec<u8> {
    enc.encode(fields.iter().map(|(n, v)| (&n[..], &v[..])))
}

/// Feeds `input` to a rewriter `step` bytes at a time.
fn rewrite(input: &[u8], step: usize) -> Vec<u8> {
    let mut r = Rewriter::default();
    let mut out = Vec::new();
    for piece in input.chunks(step) {
        r.push(piece, &mut out);
    }
    r.finish(&mut out);
    out
}

#[test]
fn the_percent_encoded_authority_becomes_localhost_across_many_blocks() {
    let mut enc = loona_hpack::Encoder::new();
    let mut input = PREFACE.to_vec();
    input.extend(frame(0x4, 0, 0, &[])); // SETTINGS
    let mut want = Vec::new();
    // The encoder indexes what it sends: later blocks name the authority, and the big
    // values, by their dynamic-table index, and big values evict older entries.
    for i in 0..60u32 {
        let big = vec![b'a' + (i % 26) as u8; 1000 + 37 * i as usize];
        let n = i.to_string();
        let extra: Vec<(&[u8], &[u8])> = if i % 3 == 0 {
            vec![(b"x-big", &big), (b"x-n", n.as_bytes())]
        } else {
            vec![(b"x-n", n.as_bytes())]
        };
        let authority: &[u8] = if i % 5 == 4 { b"localhost" } else { AUTHORITY };
        let fields = request(authority, &extra);
        let block = encode(&mut enc, &fields);
        let stream = 1 + 2 * i;
        input.extend(header_frames(
            stream,
            &block,
            1 + (i as usize * 7) % 300,
            false,
        ));
        input.extend(frame(0x0, END_STREAM, stream, &[0, 0, 0, 0, 0]));
        want.push(Seen::Headers {
            stream,
            end_stream: false,
            fields: with_authority(&fields, b"localhost"),
        });
        want.push(Seen::Other(0x0, vec![0, 0, 0, 0, 0]));
    }
    for step in [1, 7, 4096, usize::MAX] {
        let out = rewrite(&input, step.min(input.len()));
        let seen = Server::new().read(&out);
        assert_eq!(seen[0], Seen::Other(0x4, vec![]));
        assert_eq!(&seen[1..], &want[..], "fed {step} bytes at a time");
    }
}

#[test]
fn a_parseable_authority_is_kept_and_a_big_block_is_split_into_frames() {
    let mut enc = loona_hpack::Encoder::new();
    // 40,000 bytes of headers: more than two frames once re-encoded.
    let big = vec![b'z'; 20_000];
    let fields = request(
        b"accel.dev:443",
        &[(b"x-big-1", &big[..]), (b"x-big-2", &big[..])],
    );
    let mut input = PREFACE.to_vec();
    input.extend(header_frames(1, &encode(&mut enc, &fields), 16_384, true));
    let seen = Server::new().read(&rewrite(&input, 1000));
    assert_eq!(
        seen,
        vec![Seen::Headers {
            stream: 1,
            end_stream: true,
            fields
        }]
    );
}

#[test]
fn padding_is_removed_and_priority_kept() {
    let mut enc = loona_hpack::Encoder::new();
    let fields = request(AUTHORITY, &[]);
    let block = encode(&mut enc, &fields);
    let mut payload = vec![3]; // pad length
    payload.extend([0x80, 0, 0, 0, 15]); // exclusive on stream 0, weight 16
    payload.extend(&block);
    payload.extend([0, 0, 0]);
    let mut input = PREFACE.to_vec();
    input.extend(frame(HEADERS, END_HEADERS | PADDED | PRIORITY, 1, &payload));
    let out = rewrite(&input, usize::MAX);
    // The priority fields are where h2 reads them.
    assert_eq!(out[PREFACE.len() + 4], END_HEADERS | PRIORITY);
    assert_eq!(&out[PREFACE.len() + 9..][..5], &[0x80, 0, 0, 0, 15]);
    let seen = Server::new().read(&out);
    assert_eq!(
        seen,
        vec![Seen::Headers {
            stream: 1,
            end_stream: false,
            fields: with_authority(&fields, b"localhost"),
        }]
    );
}

#[test]
fn a_block_that_cannot_be_decoded_reaches_h2_as_one_it_refuses() {
    let mut input = PREFACE.to_vec();
    // Index 70: nothing in the (empty) dynamic table.
    input.extend(frame(HEADERS, END_HEADERS, 1, &[0x80 | 70]));
    input.extend(frame(0x0, END_STREAM, 1, b"after"));
    let out = rewrite(&input, usize::MAX);
    let mut want = PREFACE.to_vec();
    want.extend(frame(HEADERS, END_HEADERS, 1, &[0x80]));
    want.extend(frame(0x0, END_STREAM, 1, b"after"));
    assert_eq!(out, want);
}

#[test]
fn a_continuation_out_of_place_goes_on_as_it_came() {
    let mut enc = loona_hpack::Encoder::new();
    let block = encode(&mut enc, &request(AUTHORITY, &[]));
    let mut input = PREFACE.to_vec();
    // A block left open, then a DATA frame: h2's PROTOCOL_ERROR, so untouched.
    input.extend(frame(HEADERS, 0, 1, &block));
    input.extend(frame(0x0, 0, 1, b"x"));
    input.extend(frame(CONTINUATION, END_HEADERS, 1, &[]));
    assert_eq!(rewrite(&input, 5), input);
    // A CONTINUATION with no block open.
    let mut input = PREFACE.to_vec();
    input.extend(frame(CONTINUATION, END_HEADERS, 1, &block));
    assert_eq!(rewrite(&input, usize::MAX), input);
    // A frame larger than h2 allows, inside a block: all as it came, unbuffered.
    let mut input = PREFACE.to_vec();
    input.extend(frame(HEADERS, 0, 1, &block));
    input.extend(&frame(0x0, 0, 1, &vec![0; MAX_FRAME + 1])[..100]);
    assert_eq!(rewrite(&input, 50), input);
    // A connection that ends inside a frame.
    let mut input = PREFACE.to_vec();
    input.extend(&frame(HEADERS, 0, 1, &block)[..20]);
    assert_eq!(rewrite(&input, 3), input);
}

#[test]
fn a_table_larger_than_h2_allows_is_refused() {
    // A dynamic table size update to 8,192 (RFC 7541 section 6.3).
    let mut block = Vec::new();
    integer(&mut block, 8192, 5, 0x20);
    block.extend(encode(
        &mut loona_hpack::Encoder::new(),
        &request(AUTHORITY, &[]),
    ));
    let mut input = PREFACE.to_vec();
    input.extend(frame(HEADERS, END_HEADERS, 1, &block));
    let out = rewrite(&input, usize::MAX);
    assert_eq!(
        &out[PREFACE.len()..],
        &frame(HEADERS, END_HEADERS, 1, &[0x80])[..]
    );
}
