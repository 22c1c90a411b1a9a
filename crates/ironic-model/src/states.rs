//! Provision and power states (reference §1). The transition table arrives with the
//! state-machine work; the state strings and groups live here already because the node
//! store, the list filters and the update/delete rules depend on them.

use std::fmt;

macro_rules! provision_states {
    ($($variant:ident => $s:literal),* $(,)?) => {
        /// Every provision state a node can be stored in.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ProvisionState { $($variant),* }

        impl ProvisionState {
            pub const ALL: &'static [ProvisionState] = &[$(ProvisionState::$variant),*];
            /// The exact string Ironic uses on the wire and in the database.
            pub fn as_str(self) -> &'static str {
                match self { $(ProvisionState::$variant => $s),* }
            }
            pub fn parse(s: &str) -> Option<Self> {
                match s { $($s => Some(ProvisionState::$variant),)* _ => None }
            }
        }
    };
}

provision_states! {
    Enroll => "enroll",
    Verifying => "verifying",
    Manageable => "manageable",
    Available => "available",
    Active => "active",
    Deploying => "deploying",
    DeployWait => "wait call-back",
    DeployFailed => "deploy failed",
    DeployHold => "deploy hold",
    Deleting => "deleting",
    Cleaning => "cleaning",
    CleanWait => "clean wait",
    CleanFailed => "clean failed",
    CleanHold => "clean hold",
    Error => "error",
    Inspecting => "inspecting",
    InspectWait => "inspect wait",
    InspectFailed => "inspect failed",
    Adopting => "adopting",
    AdoptFailed => "adopt failed",
    Rescue => "rescue",
    Rescuing => "rescuing",
    RescueWait => "rescue wait",
    RescueFailed => "rescue failed",
    Unrescuing => "unrescuing",
    UnrescueFailed => "unrescue failed",
    Servicing => "servicing",
    ServiceWait => "service wait",
    ServiceFailed => "service failed",
    ServiceHold => "service hold",
}

use ProvisionState as P;

impl ProvisionState {
    /// `STABLE_STATES`.
    pub fn is_stable(self) -> bool {
        matches!(
            self,
            P::Enroll | P::Manageable | P::Available | P::Active | P::Error | P::Rescue
        )
    }

    /// `UPDATE_ALLOWED_STATES`: node PATCH is allowed here even while a target is set.
    pub fn update_allowed(self) -> bool {
        matches!(
            self,
            P::DeployFailed
                | P::Inspecting
                | P::InspectFailed
                | P::InspectWait
                | P::CleanFailed
                | P::Error
                | P::Verifying
                | P::AdoptFailed
                | P::RescueFailed
                | P::UnrescueFailed
                | P::ServiceHold
                | P::ServiceFailed
        )
    }

    /// `DELETE_ALLOWED_STATES`; `available` only when the operator allows it.
    pub fn delete_allowed(self, allow_deleting_available: bool) -> bool {
        matches!(self, P::Manageable | P::Enroll | P::AdoptFailed)
            || (allow_deleting_available && self == P::Available)
    }

    /// States in which driver interfaces and a set resource class may change.
    pub fn interface_change_allowed(self) -> bool {
        matches!(
            self,
            P::Enroll | P::Inspecting | P::InspectWait | P::Manageable | P::Available
        )
    }

    /// The string shown to a client at `version` (reference §1.1, version-dependent
    /// display): `available` is `null` below 1.2 and `inspect wait` reads `inspecting`
    /// below 1.39.
    pub fn display(self, version: crate::Version) -> Option<&'static str> {
        match self {
            P::Available if !version.at_least(2) => None,
            P::InspectWait if !version.at_least(39) => Some(P::Inspecting.as_str()),
            s => Some(s.as_str()),
        }
    }
}

impl fmt::Display for ProvisionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Power states a node reports (`None` = unknown).
pub const POWER_STATES: &[&str] = &[
    "power on",
    "power off",
    "rebooting",
    "soft rebooting",
    "soft power off",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_round_trip() {
        for s in ProvisionState::ALL {
            assert_eq!(ProvisionState::parse(s.as_str()), Some(*s));
        }
        assert_eq!(ProvisionState::ALL.len(), 30);
        assert_eq!(ProvisionState::parse("bogus"), None);
    }

    #[test]
    fn display_depends_on_version() {
        use crate::Version;
        assert_eq!(P::Available.display(Version::new(1)), None);
        assert_eq!(P::Available.display(Version::new(2)), Some("available"));
        assert_eq!(P::InspectWait.display(Version::new(38)), Some("inspecting"));
        assert_eq!(
            P::InspectWait.display(Version::new(39)),
            Some("inspect wait")
        );
    }
}
