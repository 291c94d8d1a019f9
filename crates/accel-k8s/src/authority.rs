//! The `:authority` a gRPC client sends on a unix socket, made acceptable to h2.
//!
//! grpc-go, and gRPC C-core (Python grpcio), dialling `unix:/path` with no authority
//! of their own send the socket path percent-encoded as `:authority`
//! (`%2Fvar%2Flib%2Fkubelet%2Fplugins_registry%2Faccel.dev-reg.sock`). h2, under tonic,
//! parses `:authority` with the `http` crate, which refuses a `%` in a host, and resets
//! the stream with PROTOCOL_ERROR before any handler runs. Kubelet has sent
//! `localhost` since Kubernetes 1.26 (kubernetes/kubernetes#112597); other kubelet-side
//! clients, and older kubelets, do not. The sockets accel serves to kubelet (the DRA
//! driver's two, the device plugins') therefore read each connection through
//! [`Fixed`], which sits on the client-to-server direction only:
//!
//! ```text
//!  client ── frames ──▶ Fixed::poll_read (Rewriter) ── frames ──▶ h2 (tonic)
//!         ◀────────────── poll_write, untouched ◀────────────────
//! ```
//!
//! Every frame passes as it came except header blocks (a HEADERS frame and its
//! CONTINUATIONs). A header block is decoded with an HPACK decoder that follows the
//! client's dynamic table, an `:authority` the `http` crate cannot parse becomes
//! `localhost`, and the block is encoded again with literals that are never indexed,
//! then split into frames no larger than 16,384 bytes (the smallest maximum frame size
//! a peer may set, and h2's default).
//!
//! Invariants:
//!
//! - **Every block is re-encoded**, not only those rewritten: the shim consumes the
//!   client's dynamic-table operations, so h2's decoder must never see one (its table
//!   stays empty, as the re-encoded blocks never add to it).
//! - **What h2 would refuse, it still refuses**: a block the shim cannot decode (bad
//!   HPACK, or one that decodes to more than [`MAX_DECODED`] bytes) goes on as a block
//!   no decoder accepts (index 0, RFC 7541 section 6.1), so h2 answers
//!   COMPRESSION_ERROR as it would have; a framing error (a CONTINUATION out of place,
//!   bad padding, a frame over 16,384 bytes) goes on as it came and the shim stops
//!   rewriting, so h2 sees the same violation and ends the connection. So the shim
//!   holds at most one frame, or one header block of up to [`MAX_BLOCK`] bytes. h2's own limits (header list size, frame size)
//!   still apply to what reaches it.
//! - **The dynamic table's size** follows the client's size updates, up to 4,096 bytes:
//!   the size h2 allows its peers (tonic sets no other), so a larger update is an error
//!   as it would be in h2.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{UnixListener, UnixStream};
use tokio_stream::wrappers::UnixListenerStream;
use tokio_stream::{Stream, StreamExt};
use tonic::transport::server::Connected;

/// What an unparseable `:authority` becomes (what kubelet >= 1.26 sends).
pub const REPLACEMENT: &[u8] = b"localhost";
/// The HPACK dynamic table size h2 allows a client (SETTINGS_HEADER_TABLE_SIZE's
/// default; tonic's server announces no other).
pub const TABLE_SIZE: usize = 4_096;
/// The largest header block accepted, compressed, across its frames.
pub const MAX_BLOCK: usize = 256 * 1024;
/// The largest header block accepted once decoded (names, values, and 32 bytes a
/// field, as RFC 7540's header list size counts them). h2's own limit is lower
/// (hyper's 16 KiB by default); this one only bounds the shim's memory.
pub const MAX_DECODED: usize = 1024 * 1024;

const PREFACE_LEN: usize = 24;
const FRAME_HEADER: usize = 9;
const MAX_FRAME: usize = 16_384;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

/// The accepted connections of `listener`, each read through [`Fixed`].
pub fn incoming(listener: UnixListener) -> impl Stream<Item = io::Result<Fixed<UnixStream>>> {
    UnixListenerStream::new(listener).map(|c| c.map(Fixed::new))
}

/// A connection whose client-to-server bytes pass through a [`Rewriter`].
pub struct Fixed<IO> {
    io: IO,
    rewriter: Rewriter,
    /// Rewritten bytes not yet handed to h2, from `at`.
    out: Vec<u8>,
    at: usize,
    eof: bool,
}

impl<IO> Fixed<IO> {
    pub fn new(io: IO) -> Self {
        Fixed {
            io,
            rewriter: Rewriter::default(),
            out: Vec::new(),
            at: 0,
            eof: false,
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Fixed<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.at < this.out.len() {
                let n = buf.remaining().min(this.out.len() - this.at);
                buf.put_slice(&this.out[this.at..this.at + n]);
                this.at += n;
                if this.at == this.out.len() {
                    this.out.clear();
                    this.at = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; 8192];
            let mut read = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.io).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                this.eof = true;
                this.rewriter.finish(&mut this.out);
            } else {
                this.rewriter.push(read.filled(), &mut this.out);
            }
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Fixed<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

impl<IO: Connected> Connected for Fixed<IO> {
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

/// A header block being received: its HEADERS frame and any CONTINUATIONs so far.
struct Block {
    stream: [u8; 4],
    end_stream: bool,
    priority: Option<[u8; 5]>,
    fragment: Vec<u8>,
    /// The frames as received, for when they must go on untouched.
    raw: Vec<u8>,
}

/// The client-to-server byte stream of one HTTP/2 connection, header blocks
/// re-encoded (see the module docs). Pure: bytes in, bytes out.
pub struct Rewriter {
    /// Bytes of the client's connection preface still to pass.
    preface: usize,
    /// Received bytes that are not yet a whole frame.
    pending: Vec<u8>,
    block: Option<Block>,
    decoder: loona_hpack::Decoder<'static>,
    /// Set after a framing error: everything after goes on as it came.
    passthrough: bool,
}

impl Default for Rewriter {
    fn default() -> Self {
        let mut decoder = loona_hpack::Decoder::new();
        decoder.set_max_allowed_table_size(TABLE_SIZE);
        Rewriter {
            preface: PREFACE_LEN,
            pending: Vec::new(),
            block: None,
            decoder,
            passthrough: false,
        }
    }
}

impl Rewriter {
    /// Takes the next bytes the client sent; appends what h2 is to read to `out`.
    pub fn push(&mut self, input: &[u8], out: &mut Vec<u8>) {
        if self.passthrough {
            out.extend_from_slice(input);
            return;
        }
        let mut buf = std::mem::take(&mut self.pending);
        buf.extend_from_slice(input);
        let mut at = 0;
        if self.preface > 0 {
            let n = self.preface.min(buf.len());
            out.extend_from_slice(&buf[..n]);
            self.preface -= n;
            at = n;
        }
        while !self.passthrough && buf.len() - at >= FRAME_HEADER {
            let len = u32::from_be_bytes([0, buf[at], buf[at + 1], buf[at + 2]]) as usize;
            if len > MAX_FRAME {
                // Larger than h2 allows (FRAME_SIZE_ERROR): not worth buffering.
                if let Some(b) = self.block.take() {
                    out.extend_from_slice(&b.raw);
                }
                self.passthrough = true;
                break;
            }
            if buf.len() - at < FRAME_HEADER + len {
                break;
            }
            self.frame(&buf[at..at + FRAME_HEADER + len], out);
            at += FRAME_HEADER + len;
        }
        if self.passthrough {
            out.extend_from_slice(&buf[at..]);
            at = buf.len();
        }
        buf.drain(..at);
        self.pending = buf;
    }

    /// The client closed its side: what is left goes on as it came (h2 then sees the
    /// connection end inside a frame or a header block, as it would have).
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        if let Some(b) = self.block.take() {
            out.extend_from_slice(&b.raw);
        }
        out.append(&mut self.pending);
    }

    fn frame(&mut self, frame: &[u8], out: &mut Vec<u8>) {
        let (kind, flags) = (frame[3], frame[4]);
        let stream: [u8; 4] = frame[5..9].try_into().expect("a frame header is 9 bytes");
        let payload = &frame[FRAME_HEADER..];
        match (kind, self.block.as_mut()) {
            (CONTINUATION, Some(b)) if b.stream == stream => {
                b.raw.extend_from_slice(frame);
                b.fragment.extend_from_slice(payload);
                if flags & END_HEADERS != 0 || b.fragment.len() > MAX_BLOCK {
                    let b = self.block.take().expect("matched above");
                    self.emit(b, out);
                }
            }
            // Anything else inside a header block is a connection error h2 reports.
            (_, Some(_)) => {
                let b = self.block.take().expect("matched above");
                out.extend_from_slice(&b.raw);
                out.extend_from_slice(frame);
                self.passthrough = true;
            }
            (HEADERS, None) => match headers_fragment(flags, payload) {
                Some((priority, fragment)) => {
                    let b = Block {
                        stream,
                        end_stream: flags & END_STREAM != 0,
                        priority,
                        fragment: fragment.to_vec(),
                        raw: frame.to_vec(),
                    };
                    if flags & END_HEADERS != 0 {
                        self.emit(b, out);
                    } else {
                        self.block = Some(b);
                    }
                }
                None => {
                    out.extend_from_slice(frame);
                    self.passthrough = true;
                }
            },
            (CONTINUATION, None) => {
                out.extend_from_slice(frame);
                self.passthrough = true;
            }
            _ => out.extend_from_slice(frame),
        }
    }

    /// Decodes a whole block with the client's table and writes it again as frames.
    fn emit(&mut self, b: Block, out: &mut Vec<u8>) {
        let mut block = Vec::with_capacity(b.fragment.len() + 64);
        let mut decoded = 0usize;
        let result = if b.fragment.len() > MAX_BLOCK {
            Err(())
        } else {
            self.decoder
                .decode_with_cb(&b.fragment, |name, value| {
                    decoded += name.len() + value.len() + 32;
                    if decoded > MAX_DECODED {
                        return;
                    }
                    let value: &[u8] = if &*name == b":authority"
                        && http::uri::Authority::try_from(&*value).is_err()
                    {
                        REPLACEMENT
                    } else {
                        &value
                    };
                    literal(&mut block, &name, value);
                })
                .map_err(|_| ())
        };
        if result.is_err() || decoded > MAX_DECODED {
            // The client's table is now unknown: this block is refused, and the
            // connection ends there (h2 answers COMPRESSION_ERROR).
            block.clear();
            block.push(0x80);
            self.passthrough = true;
            tracing::debug!("a header block the shim cannot decode: h2 will refuse it");
        }
        frames(out, b.stream, b.end_stream, b.priority, &block);
    }
}

/// A HEADERS frame's priority fields and header block fragment, padding removed;
/// None when the padding or priority does not fit (a PROTOCOL_ERROR for h2).
fn headers_fragment(flags: u8, payload: &[u8]) -> Option<(Option<[u8; 5]>, &[u8])> {
    let mut p = payload;
    let mut pad = 0;
    if flags & PADDED != 0 {
        pad = *p.first()? as usize;
        p = &p[1..];
    }
    let mut priority = None;
    if flags & PRIORITY != 0 {
        priority = Some(p.get(..5)?.try_into().expect("five bytes"));
        p = &p[5..];
    }
    let end = p.len().checked_sub(pad)?;
    Some((priority, &p[..end]))
}

/// Writes `block` as a HEADERS frame and as many CONTINUATIONs as it needs.
fn frames(
    out: &mut Vec<u8>,
    stream: [u8; 4],
    end_stream: bool,
    priority: Option<[u8; 5]>,
    block: &[u8],
) {
    let mut rest = block;
    let mut first = true;
    loop {
        let prio = if first { priority } else { None };
        let room = MAX_FRAME - if prio.is_some() { 5 } else { 0 };
        let (chunk, tail) = rest.split_at(room.min(rest.len()));
        let mut flags = 0;
        if first && end_stream {
            flags |= END_STREAM;
        }
        if prio.is_some() {
            flags |= PRIORITY;
        }
        if tail.is_empty() {
            flags |= END_HEADERS;
        }
        let len = chunk.len() + if prio.is_some() { 5 } else { 0 };
        out.extend_from_slice(&(len as u32).to_be_bytes()[1..]);
        out.push(if first { HEADERS } else { CONTINUATION });
        out.push(flags);
        out.extend_from_slice(&stream);
        if let Some(p) = prio {
            out.extend_from_slice(&p);
        }
        out.extend_from_slice(chunk);
        if tail.is_empty() {
            return;
        }
        first = false;
        rest = tail;
    }
}

/// A literal header field without indexing, new name (RFC 7541 section 6.2.2),
/// strings without Huffman coding.
fn literal(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(0);
    for s in [name, value] {
        integer(out, s.len(), 7, 0);
        out.extend_from_slice(s);
    }
}

/// An HPACK integer with a `prefix`-bit prefix (RFC 7541 section 5.1).
fn integer(out: &mut Vec<u8>, mut v: usize, prefix: u8, flags: u8) {
    let max = (1usize << prefix) - 1;
    if v < max {
        out.push(flags | v as u8);
        return;
    }
    out.push(flags | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

#[cfg(test)]
mod tests;
