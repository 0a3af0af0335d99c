//! A consumer on a Kafka cluster: the calls that need the consumer as a
//! whole (a rebalance listener gets it in its [`RebalanceContext`]), on
//! top of [`KafkaConsumer`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Consumer, ConsumerWaker, Held, RebalanceContext, RebalanceListener};
use crate::error::Result;
use crate::kafka::{KafkaConsumer, RebalanceEvent};

impl Consumer {
    /// A consumer on a Kafka cluster.
    pub(crate) fn on_cluster(k: KafkaConsumer) -> Consumer {
        let mut c = Consumer::with_parts(
            None,
            k.config().clone(),
            None,
            ConsumerWaker::default(),
            Arc::new(Held::default()),
        );
        c.kafka = Some(Box::new(k));
        c
    }

    /// The cluster's consumer, when this consumer reads a cluster.
    pub(crate) fn cluster_consumer(&self) -> Option<&KafkaConsumer> {
        self.kafka.as_deref()
    }

    fn cluster(&mut self) -> &mut KafkaConsumer {
        match self.kafka.as_mut() {
            Some(k) => k,
            None => unreachable!("called on a consumer of a Kafka cluster only"),
        }
    }

    /// Subscribes on the cluster to `topics` or `pattern`; with a
    /// listener, the group's changes wait for it
    /// ([`Consumer::cluster_rebalances`]).
    pub(super) fn cluster_subscribe(
        &mut self,
        topics: &[&str],
        pattern: Option<&str>,
        listener: Option<Box<dyn RebalanceListener>>,
    ) -> Result<()> {
        let k = self.cluster();
        k.defer_rebalances(listener.is_some());
        match pattern {
            Some(p) => k.subscribe_pattern(p)?,
            None => k.subscribe(topics)?,
        }
        self.listener = listener;
        Ok(())
    }

    /// A poll on the cluster (`poll` of the [`KafkaConsumer`]), with the
    /// group's changes handed to the listener as they come, until messages
    /// come or `timeout` passes.
    pub(super) fn cluster_poll<T: IsEmpty>(
        &mut self,
        timeout: Duration,
        poll: impl Fn(&mut KafkaConsumer, Duration) -> Result<T>,
    ) -> Result<T> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let got = poll(self.cluster(), left)?;
            let changed = self.cluster_rebalances();
            if !got.is_empty() || !changed || Instant::now() >= deadline {
                return Ok(got);
            }
        }
    }

    /// Applies the group's changes recorded by the cluster consumer,
    /// telling the listener: of a revocation before the partitions go (it
    /// may commit them), of an assignment after they came. Whether there
    /// was one.
    fn cluster_rebalances(&mut self) -> bool {
        let mut any = false;
        while let Some((event, tpl)) = self.cluster().take_rebalance() {
            any = true;
            self.stats.rebalances += 1;
            let mut listener = self.listener.take();
            if let (Some(l), RebalanceEvent::Revoke(parts)) = (listener.as_mut(), &event) {
                l.on_revoke(&mut RebalanceContext::new(self), parts);
            }
            if let (Some(l), RebalanceEvent::Lost(parts)) = (listener.as_mut(), &event) {
                l.on_lost(&mut RebalanceContext::new(self), parts);
            }
            self.cluster().complete_rebalance(&event, &tpl);
            if let (Some(l), RebalanceEvent::Assign(parts)) = (listener.as_mut(), &event) {
                l.on_assign(&mut RebalanceContext::new(self), parts);
            }
            // A listener set from a callback replaces this one.
            if self.listener.is_none() {
                self.listener = listener;
            }
        }
        any
    }
}

impl Consumer {
    /// Closes the consumer on the cluster: the listener is told the
    /// partitions go (it may commit them), then the member leaves.
    pub(super) fn cluster_close(&mut self) {
        self.cluster_rebalances();
        let parts = self.cluster().assignment();
        if let Some(mut l) = self.listener.take() {
            if !parts.is_empty() && !self.cluster().is_closed() {
                l.on_revoke(&mut RebalanceContext::new(self), &parts);
            }
            self.listener = Some(l);
        }
        let k = self.cluster();
        k.defer_rebalances(false);
        k.close();
    }

    /// Replaces the listener on the cluster (the group's changes wait for
    /// one while it is set).
    pub(super) fn cluster_set_listener(
        &mut self,
        listener: Option<Box<dyn RebalanceListener>>,
    ) -> Option<Box<dyn RebalanceListener>> {
        self.cluster().defer_rebalances(listener.is_some());
        std::mem::replace(&mut self.listener, listener)
    }
}

/// What a poll returns, empty or not.
pub(super) trait IsEmpty {
    fn is_empty(&self) -> bool;
}

impl IsEmpty for Vec<crate::Message> {
    fn is_empty(&self) -> bool {
        Vec::is_empty(self)
    }
}

impl IsEmpty for crate::MessageBatch {
    fn is_empty(&self) -> bool {
        crate::MessageBatch::is_empty(self)
    }
}

impl IsEmpty for Option<crate::Message> {
    fn is_empty(&self) -> bool {
        self.is_none()
    }
}
