//! HTTP caching rules (RFC 9111, RFC 9110). CONTRACT: filled in by the RFC work.
