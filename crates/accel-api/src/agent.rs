//! The agent wire types (filled in by the wire-layer work).
