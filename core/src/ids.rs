//! The ids that name things between the host and the engine.

/// A caller-chosen id that names one command until its terminal event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OpId(pub u64);

/// An engine-chosen id for one tenure of a lock held by this engine. Reentrant acquires of a
/// held lock return the same id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HoldId(pub u64);

/// An engine-chosen id that pairs a [`Request`](crate::Request) with its reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

/// The 128-bit identity of one engine, read by the host from a CSPRNG. Owner tokens derive
/// from it, so two engines never share one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClientId(pub u128);
