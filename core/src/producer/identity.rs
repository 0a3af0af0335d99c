//! A producer's identity: its id and epoch from the data directory's
//! registry (anonymous, or a durable name with its access mode's claim and
//! automatic numbering).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{numbering, ProducerConfig};
use crate::broker::BrokerInner;
use crate::dedup::NamedIdentity;
use crate::error::Result;

#[derive(Debug)]
pub(super) struct Identity {
    pub(super) id: i64,
    pub(super) epoch: i16,
    pub(super) named: Option<(String, Arc<NamedIdentity>)>,
    /// The claim on the name of a producer in an exclusive or shared
    /// access mode, released at close.
    pub(super) claim: Mutex<Option<crate::shared::LiveLock>>,
    /// The counter of a producer numbering its records itself.
    pub(super) numbering: Option<numbering::Numbering>,
}

impl Identity {
    /// The identity of an idempotent producer made with `config` (`None`
    /// when not idempotent): a named producer's from the registry, in its
    /// access mode (waiting up to `max_block_ms` in `WaitForExclusive`),
    /// else a new anonymous id.
    pub(super) fn acquire(broker: &BrokerInner, config: &ProducerConfig) -> Result<Option<Self>> {
        if !config.idempotent {
            return Ok(None);
        }
        Ok(Some(match &config.name {
            Some(name) => {
                let (ident, epoch, claim) = broker.registry()?.acquire_named_as(
                    name,
                    config.access_mode,
                    Duration::from_millis(config.max_block_ms),
                )?;
                Identity {
                    id: ident.id,
                    epoch,
                    named: Some((name.clone(), ident)),
                    claim: Mutex::new(claim),
                    numbering: config.initial_sequence.map(numbering::Numbering::new),
                }
            }
            None => Identity {
                id: broker.registry()?.allocate_anonymous()?,
                epoch: 0,
                named: None,
                claim: Mutex::new(None),
                numbering: None,
            },
        }))
    }
}
