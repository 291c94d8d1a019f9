//! The placement wire types (filled in by the wire-layer work).
