//! Volume connectors and targets, every write under the lock of their node: a create
//! and a delete at any time, a PATCH only while the node is powered off (upstream's
//! rule).

use crate::lock::{Patience, Stored, create_once};
use ironic_db::ports::Key;
use ironic_db::volume::VolumeTable;
use ironic_model::patch;
use ironic_model::volume::{
    ConnectorSpec, TargetSpec, VolumeConnector, VolumeTarget, check_powered_off,
    connector_not_found, target_not_found,
};
use ironic_model::{Error, Node};
use ironic_rpc::Context;
use ironic_rpc::calls::{
    CreateVolumeConnector, CreateVolumeTarget, DestroyVolumeConnector, DestroyVolumeTarget,
    UpdateVolumeConnector, UpdateVolumeTarget,
};

/// The node a patched document names: the same, or another that exists (400).
async fn target_node(db: &ironic_db::Db, current: &Node, wanted: &str) -> Result<Node, Error> {
    if wanted == current.uuid.as_str() {
        return Ok(current.clone());
    }
    db.node_by_uuid(wanted).await?.ok_or_else(|| {
        Error::invalid(format!(
            "Invalid input for field/attribute node_uuid. Value: '{wanted}'. "
        ))
    })
}

/// Volume connectors and targets: written under their node's lock.
pub(crate) struct Volumes {
    db: ironic_db::Db,
    locks: crate::lock::Locks,
}

impl Volumes {
    pub(crate) fn new(db: ironic_db::Db, locks: crate::lock::Locks) -> Volumes {
        Volumes { db, locks }
    }
}

impl Volumes {
    pub(crate) async fn create_volume_connector(
        &self,
        ctx: &Context,
        req: CreateVolumeConnector,
    ) -> Result<VolumeConnector, Error> {
        let CreateVolumeConnector {
            node,
            mut connector,
        } = req;
        self.locks.with_lock(&node, Patience::Retry, async move |h| {
            connector.node_id = h.node.id;
            connector.node_uuid = h.node.uuid.clone();
            let created = self.db.volume_connector_create(&connector).await;
            let earlier = || self.db.volume_connector_get(Key::Uuid(&connector.uuid));
            let created = match create_once(ctx, created, earlier, |c| c.node_id == h.node.id).await? {
                Stored::New(c) => c,
                Stored::Earlier(c) => return Ok(c),
            };
            tracing::info!(connector = %created.uuid, node = %created.node_uuid, "volume connector created");
            Ok(created)
        })
        .await
    }

    pub(crate) async fn create_volume_target(
        &self,
        ctx: &Context,
        req: CreateVolumeTarget,
    ) -> Result<VolumeTarget, Error> {
        let CreateVolumeTarget { node, mut target } = req;
        self.locks.with_lock(&node, Patience::Retry, async move |h| {
            target.node_id = h.node.id;
            target.node_uuid = h.node.uuid.clone();
            let created = self.db.volume_target_create(&target).await;
            let earlier = || self.db.volume_target_get(Key::Uuid(&target.uuid));
            let created = match create_once(ctx, created, earlier, |t| t.node_id == h.node.id).await? {
                Stored::New(t) => t,
                Stored::Earlier(t) => return Ok(t),
            };
            tracing::info!(target = %created.uuid, node = %created.node_uuid, "volume target created");
            Ok(created)
        })
        .await
    }

    pub(crate) async fn update_volume_connector(
        &self,
        _ctx: &Context,
        req: UpdateVolumeConnector,
    ) -> Result<VolumeConnector, Error> {
        let UpdateVolumeConnector {
            node,
            uuid,
            patch: ops,
        } = req;
        self.locks.with_lock(&node, Patience::Retry, async move |h| {
            let c = self
                .db
                .volume_connector_get(Key::Uuid(&uuid))
                .await?
                .filter(|c| c.node_id == h.node.id)
                .ok_or_else(|| connector_not_found(&uuid))?;
            check_powered_off(&h.node, "volume connector update")?;
            let mut doc = c.doc();
            for op in &ops {
                patch::apply(&mut doc, op)?;
            }
            let mut new = c.clone();
            new.set(ConnectorSpec::from_doc(&doc)?);
            new.node_id = target_node(&self.db, &h.node, &new.node_uuid).await?.id;
            if new == c {
                return Ok(c);
            }
            let saved = self.db.volume_connector_save(&new).await?;
            tracing::info!(connector = %saved.uuid, node = %saved.node_uuid, "volume connector updated");
            Ok(saved)
        })
        .await
    }

    pub(crate) async fn destroy_volume_connector(
        &self,
        ctx: &Context,
        req: DestroyVolumeConnector,
    ) -> Result<(), Error> {
        let DestroyVolumeConnector { node, uuid } = req;
        let r = self
            .locks
            .with_lock(&node, Patience::Retry, async move |h| {
                let c = self
                    .db
                    .volume_connector_get(Key::Uuid(&uuid))
                    .await?
                    .filter(|c| c.node_id == h.node.id)
                    .ok_or_else(|| connector_not_found(&uuid))?;
                if !self
                    .db
                    .volume_destroy(VolumeTable::Connectors, c.id)
                    .await?
                {
                    return Err(connector_not_found(&uuid));
                }
                tracing::info!(connector = %uuid, node = %h.node.uuid, "volume connector deleted");
                Ok(())
            })
            .await;
        match r {
            Err(Error::NotFound(_)) if ctx.attempt > 0 => Ok(()),
            r => r,
        }
    }

    pub(crate) async fn update_volume_target(
        &self,
        _ctx: &Context,
        req: UpdateVolumeTarget,
    ) -> Result<VolumeTarget, Error> {
        let UpdateVolumeTarget {
            node,
            uuid,
            patch: ops,
        } = req;
        self.locks.with_lock(&node, Patience::Retry, async move |h| {
            let t = self
                .db
                .volume_target_get(Key::Uuid(&uuid))
                .await?
                .filter(|t| t.node_id == h.node.id)
                .ok_or_else(|| target_not_found(&uuid))?;
            check_powered_off(&h.node, "volume target update")?;
            let mut doc = t.doc();
            for op in &ops {
                patch::apply(&mut doc, op)?;
            }
            let mut new = t.clone();
            new.set(TargetSpec::from_doc(&doc)?);
            new.node_id = target_node(&self.db, &h.node, &new.node_uuid).await?.id;
            if new == t {
                return Ok(t);
            }
            let saved = self.db.volume_target_save(&new).await?;
            tracing::info!(target = %saved.uuid, node = %saved.node_uuid, "volume target updated");
            Ok(saved)
        })
        .await
    }

    pub(crate) async fn destroy_volume_target(
        &self,
        ctx: &Context,
        req: DestroyVolumeTarget,
    ) -> Result<(), Error> {
        let DestroyVolumeTarget { node, uuid } = req;
        let r = self
            .locks
            .with_lock(&node, Patience::Retry, async move |h| {
                let t = self
                    .db
                    .volume_target_get(Key::Uuid(&uuid))
                    .await?
                    .filter(|t| t.node_id == h.node.id)
                    .ok_or_else(|| target_not_found(&uuid))?;
                if !self.db.volume_destroy(VolumeTable::Targets, t.id).await? {
                    return Err(target_not_found(&uuid));
                }
                tracing::info!(target = %uuid, node = %h.node.uuid, "volume target deleted");
                Ok(())
            })
            .await;
        match r {
            Err(Error::NotFound(_)) if ctx.attempt > 0 => Ok(()),
            r => r,
        }
    }
}
