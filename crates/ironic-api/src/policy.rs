//! Who may do what: upstream Ironic's default "secure RBAC" policy (new defaults, scope
//! enforced), written as data. A caller is system-scoped or scoped to one project, with
//! roles (`admin` ⇒ `manager` ⇒ `member` ⇒ `reader`, and `service`); a node belongs to
//! the project in its `owner` and is leased to the one in its `lessee`, an allocation to
//! its `owner`. Every handler asks [`Authz`] before it acts; the answer is recorded, so
//! the edge refuses a success that no decision allowed (fail closed) and the metrics
//! count decisions by route, policy and outcome.
//!
//! How denials read, as upstream answers them: an object the caller may not even see is
//! 404 with the ordinary not-found message (it does not tell that the object exists); a
//! visible object, or an operation without an object, is 403 "Access was denied to the
//! following resource: <policy name>". The rules and the choices where upstream is odd
//! are listed in `docs/security.md`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::extract::{FromRequestParts, MatchedPath};
use axum::http::request::Parts;
use ironic_model::runbook::Runbook;
use ironic_model::{Allocation, Error, Node};

use crate::error::ApiError;

/// A role name that is none of `admin`, `manager`, `member`, `reader`, `service`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown role {0:?} (known: admin, manager, member, reader, service)")]
pub struct UnknownRole(pub String);

/// A set of roles, already expanded by their implications.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Roles(u8);

impl Roles {
    const ADMIN: u8 = 1;
    const MANAGER: u8 = 2;
    const MEMBER: u8 = 4;
    const READER: u8 = 8;
    const SERVICE: u8 = 16;

    /// From role names, adding what each implies (as Keystone's implied roles do):
    /// `admin` gives `manager`, `member` and `reader`; `manager` gives `member` and
    /// `reader`; `member` gives `reader`. An unknown name is an error.
    pub fn parse<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<Roles, UnknownRole> {
        let mut bits = 0;
        for name in names {
            bits |= match name.trim().to_ascii_lowercase().as_str() {
                "admin" => Self::ADMIN | Self::MANAGER | Self::MEMBER | Self::READER,
                "manager" => Self::MANAGER | Self::MEMBER | Self::READER,
                "member" => Self::MEMBER | Self::READER,
                "reader" => Self::READER,
                "service" => Self::SERVICE,
                other => return Err(UnknownRole(other.to_string())),
            };
        }
        Ok(Roles(bits))
    }

    fn has(self, bit: u8) -> bool {
        self.0 & bit != 0
    }
}

/// Who is calling: a user, system-scoped (`project` is `None`) or scoped to a project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    pub user: String,
    pub project: Option<String>,
    pub roles: Roles,
}

impl Credentials {
    /// `noauth`: whoever reaches the API is a system administrator (as upstream). One
    /// shared value: no allocation per request.
    pub fn noauth() -> Arc<Credentials> {
        static NOAUTH: std::sync::LazyLock<Arc<Credentials>> = std::sync::LazyLock::new(|| {
            Arc::new(Credentials {
                user: "noauth".into(),
                project: None,
                roles: Roles(Roles::ADMIN | Roles::MANAGER | Roles::MEMBER | Roles::READER),
            })
        });
        NOAUTH.clone()
    }

    /// A request to a public route (discovery) under `http_basic`: no role.
    pub fn anonymous() -> Arc<Credentials> {
        static ANONYMOUS: std::sync::LazyLock<Arc<Credentials>> = std::sync::LazyLock::new(|| {
            Arc::new(Credentials {
                user: "anonymous".into(),
                project: None,
                roles: Roles::default(),
            })
        });
        ANONYMOUS.clone()
    }

    fn system(&self, bit: u8) -> bool {
        self.project.is_none() && self.roles.has(bit)
    }

    /// The caller's project holds `role` and equals `project`.
    fn in_project(&self, project: Option<&str>, bit: u8) -> bool {
        matches!((&self.project, project), (Some(mine), Some(theirs)) if mine == theirs)
            && self.roles.has(bit)
    }
}

/// What a rule is checked against: the projects an object belongs to.
#[derive(Debug, Clone, Copy, Default)]
pub struct Target<'a> {
    /// A node's or an allocation's `owner`.
    pub owner: Option<&'a str>,
    /// A node's `lessee`.
    pub lessee: Option<&'a str>,
}

impl<'a> Target<'a> {
    pub fn node(n: &'a Node) -> Target<'a> {
        Target {
            owner: n.owner.as_deref().filter(|s| !s.is_empty()),
            lessee: n.lessee.as_deref().filter(|s| !s.is_empty()),
        }
    }
    pub fn runbook(r: &'a Runbook) -> Target<'a> {
        Target {
            owner: r.owner.as_deref().filter(|s| !s.is_empty()),
            lessee: None,
        }
    }
    pub fn allocation(a: &'a Allocation) -> Target<'a> {
        Target {
            owner: a.owner.as_deref().filter(|s| !s.is_empty()),
            lessee: None,
        }
    }
}

/// Upstream's default rules (the composites of `ironic/common/policy.py`), by meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// System admin.
    SystemAdmin,
    /// System member.
    SystemMember,
    /// System reader or system service.
    SystemReader,
    /// Role reader or service, in any scope (lists, then filtered).
    AnyReader,
    /// System reader, a reader of the owner or lessee project, the owner's service.
    ProjectReader,
    /// System member or service, a member of the owner or lessee project.
    ProjectMember,
    /// System member or service, owner member, lessee manager, the owner's service.
    OwnerMemberLesseeManager,
    /// System member or service, owner manager, the owner's service.
    OwnerManager,
    /// System member or service, owner member, the owner's service.
    OwnerMember,
    /// System reader or service, owner reader, the owner's service.
    OwnerReader,
    /// Admin or service in any scope (creating a node owned by one's project).
    AnyAdminOrService,
    /// System admin or service (creating a node for anyone).
    SystemAdminOrService,
    /// Owner admin (deleting one's own node).
    OwnerAdmin,
    /// System member, or member of any project (creating an allocation).
    AnyMember,
    /// System reader or service, a reader of the allocation's owner project.
    AllocationReader,
    /// System member, a member of the allocation's owner project.
    AllocationMember,
    /// System admin or service, owner manager, the owner's service (creating and
    /// deleting a node's ports).
    SystemAdminOwnerManager,
    /// System member or service, owner or lessee manager, the owner's service
    /// (creating and deleting volume connectors and targets).
    ProjectManager,
    /// System reader, or an admin in any scope (a volume target's properties).
    SystemReaderOrAnyAdmin,
    /// Anyone, credentials or not: the public routes of the ramdisk agent (upstream's
    /// `is_public_api`).
    PublicApi,
    /// System reader or service, a reader of the runbook's owner project, any service.
    RunbookReader,
    /// System member, a manager of the runbook's owner project, any service.
    RunbookAdmin,
    /// System member, any manager, any service (creating a runbook).
    RunbookCreator,
}

impl Rule {
    fn allows(self, c: &Credentials, t: Target<'_>) -> bool {
        const ADMIN: u8 = Roles::ADMIN;
        const MANAGER: u8 = Roles::MANAGER;
        const MEMBER: u8 = Roles::MEMBER;
        const READER: u8 = Roles::READER;
        const SERVICE: u8 = Roles::SERVICE;
        let system_service = c.system(SERVICE);
        let owner = |bit| c.in_project(t.owner, bit);
        let lessee = |bit| c.in_project(t.lessee, bit);
        match self {
            Rule::SystemAdmin => c.system(ADMIN),
            Rule::SystemMember => c.system(MEMBER),
            Rule::SystemReader => c.system(READER) || system_service,
            Rule::AnyReader => c.roles.has(READER) || c.roles.has(SERVICE),
            Rule::ProjectReader => {
                c.system(READER)
                    || system_service
                    || owner(READER)
                    || lessee(READER)
                    || owner(SERVICE)
            }
            Rule::ProjectMember => {
                c.system(MEMBER) || system_service || owner(MEMBER) || lessee(MEMBER)
            }
            Rule::OwnerMemberLesseeManager => {
                c.system(MEMBER)
                    || system_service
                    || owner(MEMBER)
                    || lessee(MANAGER)
                    || owner(SERVICE)
            }
            Rule::OwnerManager => {
                c.system(MEMBER) || system_service || owner(MANAGER) || owner(SERVICE)
            }
            Rule::OwnerMember => {
                c.system(MEMBER) || system_service || owner(MEMBER) || owner(SERVICE)
            }
            Rule::OwnerReader => {
                c.system(READER) || system_service || owner(READER) || owner(SERVICE)
            }
            Rule::AnyAdminOrService => c.roles.has(ADMIN) || c.roles.has(SERVICE),
            Rule::SystemAdminOrService => c.system(ADMIN) || system_service,
            Rule::OwnerAdmin => owner(ADMIN),
            Rule::AnyMember => c.roles.has(MEMBER),
            Rule::AllocationReader => c.system(READER) || system_service || owner(READER),
            Rule::AllocationMember => c.system(MEMBER) || owner(MEMBER),
            Rule::ProjectManager => {
                c.system(MEMBER)
                    || system_service
                    || owner(MANAGER)
                    || lessee(MANAGER)
                    || owner(SERVICE)
            }
            Rule::SystemReaderOrAnyAdmin => c.system(READER) || c.roles.has(ADMIN),
            Rule::PublicApi => true,
            Rule::RunbookReader => {
                c.system(READER) || system_service || owner(READER) || c.roles.has(SERVICE)
            }
            Rule::RunbookAdmin => c.system(MEMBER) || owner(MANAGER) || c.roles.has(SERVICE),
            Rule::RunbookCreator => {
                c.system(MEMBER) || c.roles.has(MANAGER) || c.roles.has(SERVICE)
            }
            Rule::SystemAdminOwnerManager => {
                c.system(ADMIN) || system_service || owner(MANAGER) || owner(SERVICE)
            }
        }
    }
}

macro_rules! policies {
    ($($variant:ident = $name:literal => $rule:ident,)*) => {
        /// A named policy: upstream's name (shown in 403 messages) and its default rule.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Policy { $($variant,)* }

        impl Policy {
            pub const ALL: &[Policy] = &[$(Policy::$variant,)*];
            pub fn name(self) -> &'static str {
                match self { $(Policy::$variant => $name,)* }
            }
            fn rule(self) -> Rule {
                match self { $(Policy::$variant => Rule::$rule,)* }
            }
        }
    };
}

policies! {
    NodeGet = "baremetal:node:get" => ProjectReader,
    NodeListAll = "baremetal:node:list_all" => SystemReader,
    NodeList = "baremetal:node:list" => AnyReader,
    NodeCreate = "baremetal:node:create" => SystemAdminOrService,
    NodeCreateSelfOwned = "baremetal:node:create:self_owned_node" => AnyAdminOrService,
    NodeDelete = "baremetal:node:delete" => SystemAdmin,
    NodeDeleteSelfOwned = "baremetal:node:delete:self_owned_node" => OwnerAdmin,
    NodeUpdate = "baremetal:node:update" => ProjectMember,
    NodeUpdateExtra = "baremetal:node:update_extra" => ProjectMember,
    NodeUpdateInstanceInfo = "baremetal:node:update_instance_info" => OwnerMemberLesseeManager,
    NodeUpdateDriverInfo = "baremetal:node:update:driver_info" => OwnerMember,
    NodeUpdateProperties = "baremetal:node:update:properties" => OwnerMember,
    NodeUpdateInstanceUuid = "baremetal:node:update:instance_uuid" => OwnerMember,
    NodeUpdateLessee = "baremetal:node:update:lessee" => OwnerMember,
    NodeUpdateName = "baremetal:node:update:name" => OwnerMember,
    NodeUpdateRetired = "baremetal:node:update:retired" => OwnerMember,
    NodeUpdateDriverInterfaces = "baremetal:node:update:driver_interfaces" => OwnerManager,
    NodeUpdateOwner = "baremetal:node:update:owner" => SystemMember,
    NodeUpdateOwnerProvisioned = "baremetal:node:update_owner_provisioned" => SystemAdmin,
    NodeUpdateConductorGroup = "baremetal:node:update:conductor_group" => SystemMember,
    NodeUpdateChassisUuid = "baremetal:node:update:chassis_uuid" => SystemAdmin,
    NodeUpdateNetworkData = "baremetal:node:update:network_data" => OwnerMember,
    NodeUpdateShard = "baremetal:node:update:shard" => SystemAdmin,
    NodeUpdateParentNode = "baremetal:node:update:parent_node" => SystemMember,
    NodeUpdateDisablePowerOff = "baremetal:node:update:disable_power_off" => SystemAdmin,
    NodeDisableCleaning = "baremetal:node:disable_cleaning" => SystemAdmin,
    NodeValidate = "baremetal:node:validate" => OwnerMemberLesseeManager,
    NodeSetMaintenance = "baremetal:node:set_maintenance" => OwnerMemberLesseeManager,
    NodeClearMaintenance = "baremetal:node:clear_maintenance" => OwnerMemberLesseeManager,
    NodeSetProvisionState = "baremetal:node:set_provision_state" => OwnerMemberLesseeManager,
    NodeSetProvisionStateCleanSteps = "baremetal:node:set_provision_state:clean_steps" => OwnerMemberLesseeManager,
    NodeSetProvisionStateServiceSteps = "baremetal:node:set_provision_state:service_steps" => OwnerMemberLesseeManager,
    NodeSetPowerState = "baremetal:node:set_power_state" => ProjectMember,
    NodeGetStates = "baremetal:node:get_states" => ProjectReader,
    NodeTraitsList = "baremetal:node:traits:list" => ProjectReader,
    NodeTraitsSet = "baremetal:node:traits:set" => OwnerManager,
    NodeTraitsDelete = "baremetal:node:traits:delete" => OwnerManager,
    NodeGetFilterThreshold = "baremetal:node:get:filter_threshold" => SystemReader,
    NodeGetLastError = "baremetal:node:get:last_error" => OwnerReader,
    NodeGetReservation = "baremetal:node:get:reservation" => OwnerReader,
    NodeGetDriverInfo = "baremetal:node:get:driver_info" => OwnerReader,
    NodeGetDriverInternalInfo = "baremetal:node:get:driver_internal_info" => OwnerReader,
    AllocationGet = "baremetal:allocation:get" => AllocationReader,
    AllocationListAll = "baremetal:allocation:list_all" => SystemReader,
    AllocationList = "baremetal:allocation:list" => AnyReader,
    AllocationCreate = "baremetal:allocation:create" => AnyMember,
    AllocationCreateRestricted = "baremetal:allocation:create_restricted" => SystemMember,
    AllocationUpdate = "baremetal:allocation:update" => AllocationMember,
    AllocationDelete = "baremetal:allocation:delete" => AllocationMember,
    DeployTemplateGet = "baremetal:deploy_template:get" => SystemReader,
    DeployTemplateCreate = "baremetal:deploy_template:create" => SystemAdmin,
    DeployTemplateUpdate = "baremetal:deploy_template:update" => SystemAdmin,
    DeployTemplateDelete = "baremetal:deploy_template:delete" => SystemAdmin,
    ChassisGet = "baremetal:chassis:get" => SystemReader,
    ChassisCreate = "baremetal:chassis:create" => SystemAdmin,
    ChassisUpdate = "baremetal:chassis:update" => SystemAdmin,
    ChassisDelete = "baremetal:chassis:delete" => SystemAdmin,
    DriverGet = "baremetal:driver:get" => SystemReader,
    DriverGetProperties = "baremetal:driver:get_properties" => SystemReader,
    ConductorGet = "baremetal:conductor:get" => SystemReader,
    PortGet = "baremetal:port:get" => ProjectReader,
    PortList = "baremetal:port:list" => AnyReader,
    PortListAll = "baremetal:port:list_all" => SystemReader,
    PortCreate = "baremetal:port:create" => SystemAdminOwnerManager,
    PortDelete = "baremetal:port:delete" => SystemAdminOwnerManager,
    PortUpdate = "baremetal:port:update" => OwnerManager,
    PortgroupGet = "baremetal:portgroup:get" => ProjectReader,
    PortgroupList = "baremetal:portgroup:list" => AnyReader,
    PortgroupListAll = "baremetal:portgroup:list_all" => SystemReader,
    PortgroupCreate = "baremetal:portgroup:create" => SystemAdminOwnerManager,
    PortgroupDelete = "baremetal:portgroup:delete" => SystemAdminOwnerManager,
    PortgroupUpdate = "baremetal:portgroup:update" => OwnerManager,
    NodeVifList = "baremetal:node:vif:list" => ProjectReader,
    NodeVifAttach = "baremetal:node:vif:attach" => OwnerMemberLesseeManager,
    NodeVifDetach = "baremetal:node:vif:detach" => OwnerMemberLesseeManager,
    NodeGetConsole = "baremetal:node:get_console" => OwnerMember,
    NodeSetConsoleState = "baremetal:node:set_console_state" => OwnerMember,
    NodeGetBootDevice = "baremetal:node:get_boot_device" => OwnerManager,
    NodeSetBootDevice = "baremetal:node:set_boot_device" => OwnerManager,
    NodeInjectNmi = "baremetal:node:inject_nmi" => OwnerManager,
    NodeHistoryGet = "baremetal:node:history:get" => OwnerReader,
    NodeInventoryGet = "baremetal:node:inventory:get" => OwnerReader,
    ShardsGet = "baremetal:shards:get" => SystemReader,
    NodeSetBootMode = "baremetal:node:set_boot_mode" => ProjectMember,
    NodeSetSecureBoot = "baremetal:node:set_secure_boot" => ProjectMember,
    NodeGetIndicatorState = "baremetal:node:get_indicator_state" => ProjectReader,
    NodeSetIndicatorState = "baremetal:node:set_indicator_state" => OwnerMember,
    NodeSetRaidState = "baremetal:node:set_raid_state" => OwnerMember,
    NodeBiosGet = "baremetal:node:bios:get" => ProjectReader,
    NodeFirmwareGet = "baremetal:node:firmware:get" => ProjectReader,
    NodeVmediaAttach = "baremetal:node:vmedia:attach" => ProjectMember,
    NodeVmediaDetach = "baremetal:node:vmedia:detach" => ProjectMember,
    NodeVmediaGet = "baremetal:node:vmedia:get" => ProjectReader,
    NodeVendorPassthru = "baremetal:node:vendor_passthru" => SystemAdmin,
    DriverVendorPassthru = "baremetal:driver:vendor_passthru" => SystemAdmin,
    DriverGetRaidLogicalDiskProperties = "baremetal:driver:get_raid_logical_disk_properties" => SystemReader,
    EventsPost = "baremetal:events:post" => SystemAdmin,
    VolumeGet = "baremetal:volume:get" => ProjectReader,
    VolumeList = "baremetal:volume:list" => AnyReader,
    VolumeListAll = "baremetal:volume:list_all" => SystemReader,
    VolumeCreate = "baremetal:volume:create" => ProjectManager,
    VolumeDelete = "baremetal:volume:delete" => ProjectManager,
    VolumeUpdate = "baremetal:volume:update" => OwnerMemberLesseeManager,
    VolumeViewTargetProperties = "baremetal:volume:view_target_properties" => SystemReaderOrAnyAdmin,
    RunbookGet = "baremetal:runbook:get" => RunbookReader,
    RunbookList = "baremetal:runbook:list" => AnyReader,
    RunbookListAll = "baremetal:runbook:list_all" => SystemReader,
    RunbookCreate = "baremetal:runbook:create" => RunbookCreator,
    RunbookDelete = "baremetal:runbook:delete" => RunbookAdmin,
    RunbookUpdate = "baremetal:runbook:update" => RunbookAdmin,
    RunbookUpdatePublic = "baremetal:runbook:update:public" => SystemMember,
    RunbookUpdateOwner = "baremetal:runbook:update:owner" => SystemMember,
    RunbookUse = "baremetal:runbook:use" => RunbookAdmin,
    InspectionRuleGet = "baremetal:inspection_rule:get" => SystemReader,
    // Registered as upstream does; no request checks it (a list is `get`).
    InspectionRuleListAll = "baremetal:inspection_rule:list_all" => SystemReader,
    InspectionRuleCreate = "baremetal:inspection_rule:create" => SystemAdmin,
    InspectionRuleUpdate = "baremetal:inspection_rule:update" => SystemAdmin,
    InspectionRuleDelete = "baremetal:inspection_rule:delete" => SystemAdmin,
    IpaLookup = "baremetal:driver:ipa_lookup" => PublicApi,
    IpaHeartbeat = "baremetal:node:ipa_heartbeat" => PublicApi,
    IpaContinueInspection = "baremetal:driver:ipa_continue_inspection" => PublicApi,
}

impl Policy {
    /// Whether `c` passes this policy for an object of `t` (no recording).
    pub fn allows(self, c: &Credentials, t: Target<'_>) -> bool {
        self.rule().allows(c, t)
    }

    /// The 403 of this policy.
    pub fn denied(self) -> ApiError {
        ApiError::Domain(Error::Forbidden(format!(
            "Access was denied to the following resource: {}",
            self.name()
        )))
    }
}

/// Whether a request has had a policy decision (set by [`Authz`], read by the edge).
#[derive(Debug, Default)]
pub struct Decided(AtomicBool);

impl Decided {
    pub fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// The caller's credentials and the request's decision record: every handler takes one
/// and asks it before acting.
pub struct Authz {
    creds: Arc<Credentials>,
    decided: Arc<Decided>,
    route: String,
    method: String,
}

impl<S: Send + Sync> FromRequestParts<S> for Authz {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _st: &S) -> Result<Self, Self::Rejection> {
        let creds = parts.extensions.get::<Arc<Credentials>>().cloned();
        let decided = parts.extensions.get::<Arc<Decided>>().cloned();
        let route = parts.extensions.get::<MatchedPath>().map_or_else(
            || "unmatched".to_string(),
            |m| crate::route_label(m.as_str()),
        );
        match (creds, decided) {
            (Some(creds), Some(decided)) => Ok(Authz {
                creds,
                decided,
                route,
                method: parts.method.as_str().to_string(),
            }),
            _ => Err(ApiError::Domain(Error::internal(
                "a handler ran without credentials",
            ))),
        }
    }
}

impl Authz {
    pub fn creds(&self) -> &Credentials {
        &self.creds
    }

    /// The caller's project, for a project-scoped caller.
    pub fn project(&self) -> Option<&str> {
        self.creds.project.as_deref()
    }

    /// Decides `p` for `t`, recording the decision.
    pub fn allows(&self, p: Policy, t: Target<'_>) -> bool {
        let ok = p.allows(&self.creds, t);
        self.decided.0.store(true, Ordering::Relaxed);
        metrics::counter!(
            "ironic_api_policy_decisions_total",
            "route" => self.route.clone(),
            "method" => self.method.clone(),
            "policy" => p.name(),
            "outcome" => if ok { "allowed" } else { "denied" }
        )
        .increment(1);
        if !ok {
            tracing::info!(
                target: "ironic::audit",
                user = %self.creds.user,
                project = self.creds.project.as_deref().unwrap_or("(system)"),
                policy = p.name(),
                "denied"
            );
        }
        ok
    }

    /// Whether the caller could pass `p` on some object: the best case, an object its
    /// own project owns and leases (the rules only ever grant more for a match).
    /// Checked before looking an object up, so that a caller who may not do `p` on
    /// anything learns nothing about what exists (403).
    pub fn could(&self, p: Policy) -> Result<(), ApiError> {
        let mine = self.project();
        if self.allows(
            p,
            Target {
                owner: mine,
                lessee: mine,
            },
        ) {
            Ok(())
        } else {
            Err(p.denied())
        }
    }

    /// `p` on an object of `node` (a port, a port group …) asked for as `ident`: the
    /// object's not-found error when the caller may not see the node, 403 when it may
    /// see it but not do `p`.
    pub fn on_child(
        &self,
        node: &Node,
        get: Policy,
        p: Policy,
        not_found: impl FnOnce() -> Error,
    ) -> Result<(), ApiError> {
        if !self.allows(get, Target::node(node)) {
            return Err(not_found().into());
        }
        if p == get || self.allows(p, Target::node(node)) {
            Ok(())
        } else {
            Err(p.denied())
        }
    }

    /// An operation without an object (or checked before looking it up): 403 if denied.
    pub fn check(&self, p: Policy) -> Result<(), ApiError> {
        if self.allows(p, Target::default()) {
            Ok(())
        } else {
            Err(p.denied())
        }
    }

    /// `p` on a node the caller asked for as `ident`: 404 (the not-found message) when
    /// the caller may not see it, 403 when it may see it but not do `p`.
    pub fn node(&self, node: &Node, ident: &str, p: Policy) -> Result<(), ApiError> {
        self.visible(node, ident)?;
        self.on_node(node, p)
    }

    /// 404 unless the caller may see `node`.
    pub fn visible(&self, node: &Node, ident: &str) -> Result<(), ApiError> {
        if self.allows(Policy::NodeGet, Target::node(node)) {
            Ok(())
        } else {
            Err(Error::node_not_found(ident).into())
        }
    }

    /// 403 unless the caller may do `p` on `node` (which it may see).
    pub fn on_node(&self, node: &Node, p: Policy) -> Result<(), ApiError> {
        if p == Policy::NodeGet || self.allows(p, Target::node(node)) {
            Ok(())
        } else {
            Err(p.denied())
        }
    }

    /// Whether the caller sees a node's restricted fields (`last_error`,
    /// `reservation`, `driver_info`, `driver_internal_info`) unredacted: `None` when it
    /// sees every node's (system readers), else the check to run per node.
    pub fn redaction(&self) -> Option<Redaction> {
        if self.allows(Policy::NodeGetFilterThreshold, Target::default()) {
            None
        } else {
            Some(Redaction(self.creds.clone()))
        }
    }

    /// `p` on a runbook asked for as `ident`: 404 when the caller may not see it (a
    /// public one is seen by anyone who may list runbooks), 403 when it may see it but
    /// not do `p`.
    pub fn runbook(&self, r: &Runbook, ident: &str, p: Policy) -> Result<(), ApiError> {
        let t = Target::runbook(r);
        let sees = self.allows(Policy::RunbookGet, t)
            || (r.public && self.allows(Policy::RunbookList, Target::default()));
        if !sees {
            return Err(ironic_model::runbook::not_found(ident).into());
        }
        if p == Policy::RunbookGet || self.allows(p, t) {
            Ok(())
        } else {
            Err(p.denied())
        }
    }

    /// `p` on an allocation asked for as `ident`: 404 when the caller may not see it,
    /// 403 when it may see it but not do `p`.
    pub fn allocation(&self, a: &Allocation, ident: &str, p: Policy) -> Result<(), ApiError> {
        if !self.allows(Policy::AllocationGet, Target::allocation(a)) {
            return Err(ironic_model::allocation::not_found(ident).into());
        }
        if p == Policy::AllocationGet || self.allows(p, Target::allocation(a)) {
            Ok(())
        } else {
            Err(p.denied())
        }
    }

    /// The project a list is restricted to: `None` for callers who may list everything
    /// (`list_all`), the caller's project otherwise. `asked` is the project filter the
    /// client gave (`project` for nodes, `owner` for allocations): another project's is
    /// 403, as is a caller without a project or without the `list` policy.
    pub fn list_scope(
        &self,
        list_all: Policy,
        list: Policy,
        asked: Option<&str>,
    ) -> Result<Option<String>, ApiError> {
        if self.allows(list_all, Target::default()) {
            return Ok(None);
        }
        let Some(mine) = self.project() else {
            return Err(list_all.denied());
        };
        if asked.is_some_and(|a| a != mine) {
            return Err(list_all.denied());
        }
        if !self.allows(list, Target::default()) {
            return Err(list.denied());
        }
        Ok(Some(mine.to_string()))
    }
}

/// The per-node check for restricted fields of a caller that is not a system reader.
#[derive(Debug, Clone)]
pub struct Redaction(Arc<Credentials>);

impl Redaction {
    /// Whether `p` (one of the `baremetal:node:get:<field>` policies) lets the caller see
    /// that field of `node`.
    pub fn shows(&self, p: Policy, node: &Node) -> bool {
        p.allows(&self.0, Target::node(node))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(project: Option<&str>, roles: &str) -> Credentials {
        Credentials {
            user: "u".into(),
            project: project.map(str::to_string),
            roles: Roles::parse(roles.split(',').filter(|r| !r.is_empty())).expect("roles"),
        }
    }

    const NODE: Target<'static> = Target {
        owner: Some("own"),
        lessee: Some("les"),
    };

    /// The persona × policy matrix of upstream's defaults, row by row (the columns of
    /// `docs/security.md`): system admin, member, reader, service; owner admin,
    /// manager, member, reader; lessee admin, manager, member, reader; the owner's
    /// service; a member of an unrelated project.
    #[test]
    fn persona_matrix() {
        let personas = [
            who(None, "admin"),
            who(None, "member"),
            who(None, "reader"),
            who(None, "service"),
            who(Some("own"), "admin"),
            who(Some("own"), "manager"),
            who(Some("own"), "member"),
            who(Some("own"), "reader"),
            who(Some("les"), "admin"),
            who(Some("les"), "manager"),
            who(Some("les"), "member"),
            who(Some("les"), "reader"),
            who(Some("own"), "service"),
            who(Some("other"), "admin"),
        ];
        let rows: &[(Policy, &str)] = &[
            (Policy::NodeGet, "YYYY YYYY YYYY Y N"),
            (Policy::NodeValidate, "YYNY YYYN YYNN Y N"),
            (Policy::NodeSetProvisionState, "YYNY YYYN YYNN Y N"),
            (Policy::NodeSetPowerState, "YYNY YYYN YYYN N N"),
            (Policy::NodeTraitsSet, "YYNY YYNN NNNN Y N"),
            (Policy::NodeUpdateExtra, "YYNY YYYN YYYN N N"),
            (Policy::NodeUpdateInstanceInfo, "YYNY YYYN YYNN Y N"),
            (Policy::NodeUpdateDriverInfo, "YYNY YYYN NNNN Y N"),
            (Policy::NodeUpdateDriverInterfaces, "YYNY YYNN NNNN Y N"),
            (Policy::NodeUpdateOwner, "YYNN NNNN NNNN N N"),
            (Policy::NodeUpdateChassisUuid, "YNNN NNNN NNNN N N"),
            (Policy::NodeDelete, "YNNN NNNN NNNN N N"),
            (Policy::NodeDeleteSelfOwned, "NNNN YNNN NNNN N N"),
            (Policy::NodeGetDriverInfo, "YYYY YYYY NNNN Y N"),
            (Policy::NodeListAll, "YYYY NNNN NNNN N N"),
            (Policy::DeployTemplateGet, "YYYY NNNN NNNN N N"),
            (Policy::DeployTemplateCreate, "YNNN NNNN NNNN N N"),
        ];
        for (p, expected) in rows {
            let expected: Vec<bool> = expected
                .chars()
                .filter(|c| !c.is_whitespace())
                .map(|c| c == 'Y')
                .collect();
            assert_eq!(expected.len(), personas.len(), "{p:?}");
            for (c, want) in personas.iter().zip(expected) {
                assert_eq!(p.allows(c, NODE), want, "{} for {c:?}", p.name());
            }
        }
    }

    #[test]
    fn roles_imply_the_lesser_ones() {
        let admin = Roles::parse(["admin"]).expect("known");
        assert!(admin.has(Roles::READER) && admin.has(Roles::MEMBER) && !admin.has(Roles::SERVICE));
        let reader = Roles::parse(["Reader"]).expect("case-insensitive");
        assert!(reader.has(Roles::READER) && !reader.has(Roles::MEMBER));
        assert!(Roles::parse(["root"]).is_err());
    }

    #[test]
    fn allocations_belong_to_their_owner_only() {
        let a = Target {
            owner: Some("p"),
            lessee: None,
        };
        assert!(Policy::AllocationGet.allows(&who(Some("p"), "reader"), a));
        assert!(!Policy::AllocationDelete.allows(&who(Some("p"), "reader"), a));
        assert!(Policy::AllocationDelete.allows(&who(Some("p"), "member"), a));
        assert!(!Policy::AllocationGet.allows(&who(Some("q"), "admin"), a));
        // An allocation without an owner is visible to system users only.
        assert!(!Policy::AllocationGet.allows(&who(Some("p"), "admin"), Target::default()));
        assert!(Policy::AllocationGet.allows(&who(None, "reader"), Target::default()));
        // Any member may create one (it becomes theirs); a reader may not.
        assert!(Policy::AllocationCreate.allows(&who(Some("q"), "member"), Target::default()));
        assert!(!Policy::AllocationCreate.allows(&who(Some("q"), "reader"), Target::default()));
    }

    #[test]
    fn names_are_unique() {
        let mut names: Vec<&str> = Policy::ALL.iter().map(|p| p.name()).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n);
    }
}
