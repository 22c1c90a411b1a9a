//! Reading every node's state, paced: the periodic tasks that look at every node (the
//! node count behind `ironic_conductor_nodes`, the power-state sync) read
//! [`Db::node_states`] page by page in id order with a pause between pages. Read back to
//! back at 100,000 nodes, such a pass took PostgreSQL for most of a second and halved the
//! API's list rate meanwhile (`docs/scale.md`, fifth run).

use std::time::Duration;

use ironic_db::{Db, NodeState};
use ironic_model::{Error, NodeId};

use crate::work::StopSignal;

/// At most this many pages per pass (a bound on the loop, far beyond any fleet: with
/// pages of 1,000 it is a million nodes).
pub(crate) const MAX_PAGES: u32 = 1_000;

/// Every node's [`NodeState`], one page at a time.
pub(crate) struct EveryNode {
    db: Db,
    page: i64,
    pause: Duration,
    /// What is left of the pauses' budget: past it, pages follow back to back, so that a
    /// pass over a fleet larger than planned still ends.
    budget: Duration,
    stop: StopSignal,
    after: NodeId,
    pages: u32,
    done: bool,
}

/// What [`EveryNode::next`] found.
pub(crate) enum Page {
    /// The next nodes by id (never empty).
    Nodes(Vec<NodeState>),
    /// Every node was read.
    End,
    /// The conductor is stopping: the pass ends unfinished.
    Stopped,
    /// [`MAX_PAGES`] pages were read and nodes remain.
    Bounded,
}

impl EveryNode {
    /// A pass of `page` nodes per statement, `pause` between statements, the pauses adding
    /// up to `budget` at most.
    pub(crate) fn new(
        db: Db,
        page: i64,
        pause: Duration,
        budget: Duration,
        stop: StopSignal,
    ) -> EveryNode {
        EveryNode {
            db,
            page: page.max(1),
            pause,
            budget,
            stop,
            after: NodeId(0),
            pages: 0,
            done: false,
        }
    }

    /// The next page, after the pause (none before the first page).
    pub(crate) async fn next(&mut self) -> Result<Page, Error> {
        if self.done {
            return Ok(Page::End);
        }
        if self.pages == MAX_PAGES {
            return Ok(Page::Bounded);
        }
        // Past the pauses' budget (or with no pause) pages follow back to back: the stop
        // is looked at before each one all the same.
        if self.stop.is_stopped() {
            return Ok(Page::Stopped);
        }
        if self.pages > 0 && !self.pause.is_zero() && self.budget >= self.pause {
            self.budget -= self.pause;
            tokio::select! {
                () = tokio::time::sleep(self.pause) => {}
                () = self.stop.stopped() => return Ok(Page::Stopped),
            }
        }
        let rows = self.db.node_states(self.after, self.page).await?;
        self.pages += 1;
        self.done = (rows.len() as i64) < self.page;
        match rows.last() {
            Some(last) => {
                self.after = last.id;
                Ok(Page::Nodes(rows))
            }
            None => Ok(Page::End),
        }
    }

    /// The conductor's stop signal, for waits of the task's own between pages.
    pub(crate) fn stop_signal(&mut self) -> &mut StopSignal {
        &mut self.stop
    }
}
