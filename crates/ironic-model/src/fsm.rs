//! The provision state machine (reference §1) as data: every transition, the target
//! each state records, the kind of each state, and the API verbs that start them. The
//! API checks a verb against it before calling a conductor; the conductor applies it
//! under the node lock ([`process`]). `docs/states.md` shows it as a diagram, generated
//! by [`mermaid`] and checked by a test.

use crate::Version;
use crate::error::Error;
use crate::states::ProvisionState as P;

/// What makes a node change state: API verbs, plus the internal events a conductor's
/// background work fires (`done`, `fail`, `wait`, `resume`, `hold`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Event {
    Manage,
    Provide,
    Clean,
    Inspect,
    Adopt,
    Deploy,
    Rebuild,
    Delete,
    Abort,
    Rescue,
    Unrescue,
    Unhold,
    Service,
    Done,
    Fail,
    Wait,
    Resume,
    Hold,
}

impl Event {
    pub const ALL: &'static [Event] = &[
        Event::Manage,
        Event::Provide,
        Event::Clean,
        Event::Inspect,
        Event::Adopt,
        Event::Deploy,
        Event::Rebuild,
        Event::Delete,
        Event::Abort,
        Event::Rescue,
        Event::Unrescue,
        Event::Unhold,
        Event::Service,
        Event::Done,
        Event::Fail,
        Event::Wait,
        Event::Resume,
        Event::Hold,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Event::Manage => "manage",
            Event::Provide => "provide",
            Event::Clean => "clean",
            Event::Inspect => "inspect",
            Event::Adopt => "adopt",
            Event::Deploy => "deploy",
            Event::Rebuild => "rebuild",
            Event::Delete => "delete",
            Event::Abort => "abort",
            Event::Rescue => "rescue",
            Event::Unrescue => "unrescue",
            Event::Unhold => "unhold",
            Event::Service => "service",
            Event::Done => "done",
            Event::Fail => "fail",
            Event::Wait => "wait",
            Event::Resume => "resume",
            Event::Hold => "hold",
        }
    }

    /// Fired only by a conductor's own work, never accepted from a client.
    pub fn is_internal(self) -> bool {
        matches!(
            self,
            Event::Done | Event::Fail | Event::Wait | Event::Resume | Event::Hold
        )
    }
}

/// Every transition: (from, event, to). 93 of them, as upstream's machine.
pub const TRANSITIONS: &[(P, Event, P)] = &[
    (P::Enroll, Event::Manage, P::Verifying),
    (P::Verifying, Event::Done, P::Manageable),
    (P::Verifying, Event::Fail, P::Enroll),
    (P::Manageable, Event::Provide, P::Cleaning),
    (P::Manageable, Event::Clean, P::Cleaning),
    (P::Manageable, Event::Inspect, P::Inspecting),
    (P::Manageable, Event::Adopt, P::Adopting),
    (P::Available, Event::Deploy, P::Deploying),
    (P::Available, Event::Manage, P::Manageable),
    (P::Deploying, Event::Fail, P::DeployFailed),
    (P::Deploying, Event::Wait, P::DeployWait),
    (P::Deploying, Event::Hold, P::DeployHold),
    (P::Deploying, Event::Done, P::Active),
    (P::DeployWait, Event::Hold, P::DeployHold),
    (P::DeployWait, Event::Resume, P::Deploying),
    (P::DeployWait, Event::Fail, P::DeployFailed),
    (P::DeployWait, Event::Abort, P::DeployFailed),
    (P::DeployWait, Event::Delete, P::Deleting),
    (P::DeployHold, Event::Unhold, P::DeployWait),
    (P::DeployHold, Event::Abort, P::DeployFailed),
    (P::DeployFailed, Event::Rebuild, P::Deploying),
    (P::DeployFailed, Event::Deploy, P::Deploying),
    (P::DeployFailed, Event::Delete, P::Deleting),
    (P::Active, Event::Rebuild, P::Deploying),
    (P::Active, Event::Delete, P::Deleting),
    (P::Active, Event::Rescue, P::Rescuing),
    (P::Active, Event::Service, P::Servicing),
    (P::Deleting, Event::Fail, P::Error),
    (P::Deleting, Event::Clean, P::Cleaning),
    (P::Cleaning, Event::Done, P::Available),
    (P::Cleaning, Event::Fail, P::CleanFailed),
    (P::Cleaning, Event::Wait, P::CleanWait),
    (P::Cleaning, Event::Hold, P::CleanHold),
    (P::Cleaning, Event::Manage, P::Manageable),
    (P::CleanWait, Event::Fail, P::CleanFailed),
    (P::CleanWait, Event::Abort, P::CleanFailed),
    (P::CleanWait, Event::Hold, P::CleanHold),
    (P::CleanWait, Event::Resume, P::Cleaning),
    (P::CleanHold, Event::Abort, P::CleanFailed),
    (P::CleanHold, Event::Unhold, P::CleanWait),
    (P::CleanFailed, Event::Manage, P::Manageable),
    (P::Error, Event::Rebuild, P::Deploying),
    (P::Error, Event::Delete, P::Deleting),
    (P::Inspecting, Event::Done, P::Manageable),
    (P::Inspecting, Event::Fail, P::InspectFailed),
    (P::Inspecting, Event::Wait, P::InspectWait),
    (P::InspectWait, Event::Done, P::Manageable),
    (P::InspectWait, Event::Fail, P::InspectFailed),
    (P::InspectWait, Event::Abort, P::InspectFailed),
    (P::InspectWait, Event::Resume, P::Inspecting),
    (P::InspectFailed, Event::Manage, P::Manageable),
    (P::InspectFailed, Event::Inspect, P::Inspecting),
    (P::Adopting, Event::Done, P::Active),
    (P::Adopting, Event::Fail, P::AdoptFailed),
    (P::AdoptFailed, Event::Adopt, P::Adopting),
    (P::AdoptFailed, Event::Manage, P::Manageable),
    (P::Rescuing, Event::Done, P::Rescue),
    (P::Rescuing, Event::Wait, P::RescueWait),
    (P::Rescuing, Event::Fail, P::RescueFailed),
    (P::RescueWait, Event::Resume, P::Rescuing),
    (P::RescueWait, Event::Fail, P::RescueFailed),
    (P::RescueWait, Event::Abort, P::RescueFailed),
    (P::RescueWait, Event::Delete, P::Deleting),
    (P::Rescue, Event::Rescue, P::Rescuing),
    (P::Rescue, Event::Delete, P::Deleting),
    (P::Rescue, Event::Unrescue, P::Unrescuing),
    (P::RescueFailed, Event::Rescue, P::Rescuing),
    (P::RescueFailed, Event::Unrescue, P::Unrescuing),
    (P::RescueFailed, Event::Delete, P::Deleting),
    (P::Unrescuing, Event::Done, P::Active),
    (P::Unrescuing, Event::Fail, P::UnrescueFailed),
    (P::UnrescueFailed, Event::Rescue, P::Rescuing),
    (P::UnrescueFailed, Event::Unrescue, P::Unrescuing),
    (P::UnrescueFailed, Event::Delete, P::Deleting),
    (P::Servicing, Event::Done, P::Active),
    (P::Servicing, Event::Fail, P::ServiceFailed),
    (P::Servicing, Event::Wait, P::ServiceWait),
    (P::Servicing, Event::Hold, P::ServiceHold),
    (P::ServiceWait, Event::Hold, P::ServiceHold),
    (P::ServiceWait, Event::Resume, P::Servicing),
    (P::ServiceWait, Event::Fail, P::ServiceFailed),
    (P::ServiceWait, Event::Abort, P::ServiceFailed),
    (P::ServiceWait, Event::Delete, P::Deleting),
    (P::ServiceHold, Event::Service, P::Servicing),
    (P::ServiceHold, Event::Unhold, P::ServiceWait),
    (P::ServiceHold, Event::Fail, P::ServiceFailed),
    (P::ServiceHold, Event::Abort, P::ServiceFailed),
    (P::ServiceFailed, Event::Service, P::Servicing),
    (P::ServiceFailed, Event::Rescue, P::Rescuing),
    (P::ServiceFailed, Event::Wait, P::ServiceWait),
    (P::ServiceFailed, Event::Hold, P::ServiceHold),
    (P::ServiceFailed, Event::Delete, P::Deleting),
    (P::ServiceFailed, Event::Abort, P::Active),
];

/// Where `event` takes a node in `from`, if it may happen there.
pub fn next(from: P, event: Event) -> Option<P> {
    TRANSITIONS
        .iter()
        .find(|(f, e, _)| *f == from && *e == event)
        .map(|(_, _, to)| *to)
}

/// The kind of a state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Nothing is happening; a client decides what comes next.
    Stable,
    /// A conductor is working on the node.
    Transient,
    /// Waiting for something outside the conductor (a ramdisk, a callback).
    Waiting,
    /// Work failed; a client decides what comes next.
    Failure,
    /// Paused on purpose by a step; `unhold` or `abort` continues.
    Hold,
}

pub fn kind(s: P) -> Kind {
    match s {
        P::Enroll | P::Manageable | P::Available | P::Active | P::Error | P::Rescue => Kind::Stable,
        P::DeployWait | P::CleanWait | P::InspectWait | P::RescueWait | P::ServiceWait => {
            Kind::Waiting
        }
        P::DeployFailed
        | P::CleanFailed
        | P::InspectFailed
        | P::RescueFailed
        | P::UnrescueFailed
        | P::AdoptFailed
        | P::ServiceFailed => Kind::Failure,
        P::DeployHold | P::CleanHold | P::ServiceHold => Kind::Hold,
        P::Verifying
        | P::Deploying
        | P::Deleting
        | P::Cleaning
        | P::Inspecting
        | P::Adopting
        | P::Rescuing
        | P::Unrescuing
        | P::Servicing => Kind::Transient,
    }
}

/// The stable state a node entering `s` is heading for (`target_provision_state`);
/// `None` for stable states. Manual cleaning overrides `available` with `manageable`.
pub fn target(s: P) -> Option<P> {
    match s {
        P::Verifying | P::Inspecting | P::InspectWait | P::InspectFailed => Some(P::Manageable),
        P::Deploying
        | P::DeployWait
        | P::DeployFailed
        | P::DeployHold
        | P::Adopting
        | P::AdoptFailed
        | P::Unrescuing
        | P::UnrescueFailed
        | P::Servicing
        | P::ServiceWait
        | P::ServiceFailed
        | P::ServiceHold => Some(P::Active),
        P::Deleting | P::Cleaning | P::CleanWait | P::CleanFailed | P::CleanHold => {
            Some(P::Available)
        }
        P::Rescuing | P::RescueWait | P::RescueFailed => Some(P::Rescue),
        P::Enroll | P::Manageable | P::Available | P::Active | P::Error | P::Rescue => None,
    }
}

/// States a crash can leave a node in with nobody working on it
/// (`STUCK_STATES_TREATED_AS_FAIL`): whoever takes the node over fires `fail`.
pub fn stuck_on_crash(s: P) -> bool {
    matches!(
        s,
        P::Deploying
            | P::Cleaning
            | P::Verifying
            | P::Inspecting
            | P::Adopting
            | P::Rescuing
            | P::Unrescuing
            | P::Deleting
            | P::Servicing
    )
}

/// A state change as the conductor records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    pub state: P,
    pub target: Option<P>,
}

/// Applies `event` to a node in `from` (reference §1.4): the new state, and the target
/// it records — none when it lands in a stable state with no background work to follow,
/// else the state's FSM target or `target_override` (manual cleaning returns to
/// `manageable`). `Err` when the event may not happen in `from`.
pub fn process(
    from: P,
    event: Event,
    background: bool,
    target_override: Option<P>,
) -> Result<Transition, Error> {
    let state = next(from, event).ok_or_else(|| {
        Error::InvalidState(format!(
            "Event \"{}\" is not allowed in state \"{}\".",
            event.as_str(),
            from
        ))
    })?;
    let target = if !background && kind(state) == Kind::Stable {
        None
    } else {
        target_override.or_else(|| target(state))
    };
    Ok(Transition { state, target })
}

/// One value of `PUT /v1/nodes/{node}/states/provision` `target`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verb {
    /// What the client sends.
    pub name: &'static str,
    pub event: Event,
    /// The first microversion that accepts it (lower: 406).
    pub min_minor: u16,
}

/// The verbs of the reference (§1.5), up to the newest microversion.
pub const VERBS: &[Verb] = &[
    Verb {
        name: "active",
        event: Event::Deploy,
        min_minor: 1,
    },
    Verb {
        name: "deploy",
        event: Event::Deploy,
        min_minor: 73,
    },
    Verb {
        name: "rebuild",
        event: Event::Rebuild,
        min_minor: 1,
    },
    Verb {
        name: "deleted",
        event: Event::Delete,
        min_minor: 1,
    },
    Verb {
        name: "undeploy",
        event: Event::Delete,
        min_minor: 73,
    },
    Verb {
        name: "manage",
        event: Event::Manage,
        min_minor: 4,
    },
    Verb {
        name: "provide",
        event: Event::Provide,
        min_minor: 4,
    },
    Verb {
        name: "inspect",
        event: Event::Inspect,
        min_minor: 6,
    },
    Verb {
        name: "abort",
        event: Event::Abort,
        min_minor: 13,
    },
    Verb {
        name: "clean",
        event: Event::Clean,
        min_minor: 15,
    },
    Verb {
        name: "adopt",
        event: Event::Adopt,
        min_minor: 17,
    },
    Verb {
        name: "rescue",
        event: Event::Rescue,
        min_minor: 38,
    },
    Verb {
        name: "unrescue",
        event: Event::Unrescue,
        min_minor: 38,
    },
    Verb {
        name: "unhold",
        event: Event::Unhold,
        min_minor: 85,
    },
    Verb {
        name: "service",
        event: Event::Service,
        min_minor: 87,
    },
];

/// The verb a client named, checked against its microversion: 400 for an unknown one,
/// 406 for one newer than the request.
pub fn verb(name: &str, version: Version) -> Result<&'static Verb, Error> {
    let v = VERBS.iter().find(|v| v.name == name).ok_or_else(|| {
        Error::Invalid(format!(
            "The requested action \"{name}\" could not be understood."
        ))
    })?;
    if !version.at_least(v.min_minor) {
        return Err(Error::not_acceptable());
    }
    Ok(v)
}

/// `abort` needs a newer microversion in some states (inspect wait: 1.41; wait
/// call-back: 1.110).
pub fn abort_min_minor(from: P) -> u16 {
    match from {
        P::InspectWait => 41,
        P::DeployWait => 110,
        _ => 13,
    }
}

/// Upstream's `InvalidStateRequested` (400): the verb cannot start from this state.
pub fn invalid_state_requested(action: &str, node: &str, state: P) -> Error {
    Error::Invalid(format!(
        "The requested action \"{action}\" can not be performed on node \"{node}\" while it is in state \"{state}\"."
    ))
}

/// The machine as a Mermaid state diagram (`docs/states.md`).
pub fn mermaid() -> String {
    let id = |s: P| s.as_str().replace([' ', '-'], "_");
    let mut out = String::from("stateDiagram-v2\n");
    for s in crate::states::ProvisionState::ALL {
        out.push_str(&format!("    {}: {}\n", id(*s), s.as_str()));
    }
    for (from, event, to) in TRANSITIONS {
        out.push_str(&format!(
            "    {} --> {}: {}\n",
            id(*from),
            id(*to),
            event.as_str()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::states::ProvisionState;
    use std::collections::{HashSet, VecDeque};

    #[test]
    fn the_table_is_upstreams_and_deterministic() {
        assert_eq!(TRANSITIONS.len(), 93);
        let mut seen = HashSet::new();
        for (from, event, _) in TRANSITIONS {
            assert!(seen.insert((*from, *event)), "{from} {event:?} twice");
        }
        // Every state appears in the machine.
        for s in ProvisionState::ALL {
            assert!(
                TRANSITIONS.iter().any(|(f, _, t)| f == s || t == s),
                "{s} unreachable and inescapable"
            );
        }
    }

    #[test]
    fn groups_agree_with_the_kinds() {
        for s in ProvisionState::ALL {
            assert_eq!(s.is_stable(), kind(*s) == Kind::Stable, "{s}");
            assert_eq!(target(*s).is_none(), kind(*s) == Kind::Stable, "{s}");
            if stuck_on_crash(*s) {
                assert_eq!(kind(*s), Kind::Transient, "{s}");
                assert!(next(*s, Event::Fail).is_some(), "{s} has a fail exit");
            }
        }
    }

    /// From every state some stable state is reachable: nothing is a dead end.
    #[test]
    fn no_state_is_a_dead_end() {
        for s in ProvisionState::ALL {
            let mut todo = VecDeque::from([*s]);
            let mut seen = HashSet::from([*s]);
            let mut found = kind(*s) == Kind::Stable;
            while let Some(x) = todo.pop_front() {
                for (f, _, t) in TRANSITIONS {
                    if *f == x && seen.insert(*t) {
                        found |= kind(*t) == Kind::Stable;
                        todo.push_back(*t);
                    }
                }
            }
            assert!(found, "no way out of {s}");
        }
    }

    #[test]
    fn verbs_map_to_client_events() {
        for v in VERBS {
            assert!(!v.event.is_internal(), "{}", v.name);
            assert!(
                TRANSITIONS.iter().any(|(_, e, _)| *e == v.event),
                "{} starts nothing",
                v.name
            );
        }
        assert_eq!(
            verb("manage", Version::new(4)).map(|v| v.event),
            Ok(Event::Manage)
        );
        assert_eq!(
            verb("manage", Version::new(3)),
            Err(Error::not_acceptable())
        );
        assert_eq!(
            verb("clean", Version::new(14)),
            Err(Error::not_acceptable())
        );
        assert!(matches!(verb("fly", Version::MAX), Err(Error::Invalid(_))));
    }

    #[test]
    fn process_records_targets() {
        // provide: cleaning, heading for available.
        let t = process(P::Manageable, Event::Provide, true, None).unwrap();
        assert_eq!((t.state, t.target), (P::Cleaning, Some(P::Available)));
        // manual cleaning returns to manageable.
        let t = process(P::Manageable, Event::Clean, true, Some(P::Manageable)).unwrap();
        assert_eq!((t.state, t.target), (P::Cleaning, Some(P::Manageable)));
        // a plain move to a stable state clears the target.
        let t = process(P::CleanFailed, Event::Manage, false, None).unwrap();
        assert_eq!((t.state, t.target), (P::Manageable, None));
        // clean failed has one exit.
        for e in Event::ALL {
            let ok = process(P::CleanFailed, *e, false, None).is_ok();
            assert_eq!(ok, *e == Event::Manage, "{e:?}");
        }
        assert!(matches!(
            process(P::Available, Event::Clean, true, None),
            Err(Error::InvalidState(_))
        ));
    }

    #[test]
    fn the_diagram_has_every_transition() {
        let m = mermaid();
        assert_eq!(m.matches(" --> ").count(), TRANSITIONS.len());
        assert!(m.contains("clean_wait --> clean_failed: abort"));
    }
}

#[cfg(test)]
mod docs {
    /// `docs/states.md` shows the machine this build runs. Regenerate the diagram with
    /// `IRONIC_WRITE_DOCS=1 cargo test -p ironic-model docs_`.
    #[test]
    fn docs_show_the_current_machine() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/states.md");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let block = format!("```mermaid\n{}```\n", super::mermaid());
        if std::env::var_os("IRONIC_WRITE_DOCS").is_some() {
            // Replace the first ```mermaid block (or append one).
            const OPEN: &str = "```mermaid\n";
            let new = match text.find(OPEN).and_then(|s| {
                let body = s + OPEN.len();
                text[body..].find("```\n").map(|e| (s, body + e + 4))
            }) {
                Some((s, e)) => format!("{}{block}{}", &text[..s], &text[e..]),
                None => format!("{text}\n{block}"),
            };
            std::fs::write(&path, new).unwrap_or_else(|e| panic!("{e}"));
            return;
        }
        assert!(
            text.contains(&block),
            "docs/states.md is out of date: IRONIC_WRITE_DOCS=1 cargo test -p ironic-model docs_"
        );
    }
}
