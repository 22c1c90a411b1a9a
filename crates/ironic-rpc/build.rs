//! Generates, from `proto/ironic/rpc/v1/conductor.proto` with a vendored `protoc` (no
//! system protoc needed):
//!
//! - the protobuf types (`pb`), with prost;
//! - the method table (`pb::conductor_methods`): one constant per method, and every
//!   method with its request and reply message;
//! - the calls (`calls.rs` in `OUT_DIR`, included by `src/calls.rs`): for every method
//!   of the `Conductor` service, its Rust request type (named after the method, fields
//!   after the request message's) and its `impl Call`, from the message's fields and
//!   the method's `(call)` option (route, retry safety, lost-call hint); and the
//!   `contract!` list that makes the `Handlers` trait and the dispatch tables.
//!
//! The field types: a scalar stays itself (`optional` → `Option`, `repeated` → `Vec`),
//! a message field names the domain type of the same name (`NodeRef node` → `NodeRef`,
//! `optional NodeRef` → `Option<NodeRef>`), a `*_json` text drops the suffix and is a
//! `serde_json::Value`; a field's `(rust)` option names another type or name. The
//! conversion of each field is `convert::Field`, written once per type.

use std::collections::HashMap;
use std::fmt::Write;
use std::path::Path;

use prost::Message;
use prost_build::{Service, ServiceGenerator};

/// The package whose service is the contract.
const PACKAGE: &str = "ironic.rpc.v1";

// ---------------------------------------------------------------------------------------
// The method table (prost's service hook)

struct MethodTable;

fn short(proto_type: &str) -> &str {
    proto_type.rsplit('.').next().unwrap_or(proto_type)
}

impl ServiceGenerator for MethodTable {
    fn generate(&mut self, service: Service, buf: &mut String) {
        let module = service.name.to_lowercase();
        let _ = writeln!(
            buf,
            "/// The methods of the `{}` service, generated from the proto.\npub mod {module}_methods {{",
            service.proto_name
        );
        for m in &service.methods {
            let _ = writeln!(
                buf,
                "    pub const {}: &str = {:?};",
                m.proto_name.to_uppercase(),
                m.proto_name
            );
        }
        let _ = writeln!(
            buf,
            "    /// `(method, request message, reply message)`, in the proto's order.\n    pub const ALL: &[(&str, &str, &str)] = &["
        );
        for m in &service.methods {
            let _ = writeln!(
                buf,
                "        ({:?}, {:?}, {:?}),",
                m.proto_name,
                short(&m.input_proto_type),
                short(&m.output_proto_type)
            );
        }
        let _ = writeln!(buf, "    ];\n}}");
    }
}

// ---------------------------------------------------------------------------------------
// The part of `google/protobuf/descriptor.proto` read here, with the contract's own
// options (`CallSpec`, `RustField` in conductor.proto) in place of the extension
// fields (number 50801, as conductor.proto extends the options): prost's own
// descriptor types drop extensions.

#[derive(Clone, PartialEq, Message)]
struct FileSet {
    #[prost(message, repeated, tag = "1")]
    file: Vec<File>,
}

#[derive(Clone, PartialEq, Message)]
struct File {
    #[prost(string, optional, tag = "2")]
    package: Option<String>,
    #[prost(message, repeated, tag = "4")]
    message_type: Vec<Msg>,
    #[prost(message, repeated, tag = "6")]
    service: Vec<Svc>,
    #[prost(message, optional, tag = "9")]
    source_code_info: Option<SourceInfo>,
}

#[derive(Clone, PartialEq, Message)]
struct Msg {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
    #[prost(message, repeated, tag = "2")]
    field: Vec<FieldDesc>,
}

#[derive(Clone, PartialEq, Message)]
struct FieldDesc {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
    #[prost(int32, optional, tag = "4")]
    label: Option<i32>,
    #[prost(int32, optional, tag = "5")]
    r#type: Option<i32>,
    #[prost(string, optional, tag = "6")]
    type_name: Option<String>,
    #[prost(message, optional, tag = "8")]
    options: Option<FieldOpts>,
    #[prost(int32, optional, tag = "9")]
    oneof_index: Option<i32>,
    #[prost(bool, optional, tag = "17")]
    proto3_optional: Option<bool>,
}

#[derive(Clone, PartialEq, Message)]
struct FieldOpts {
    #[prost(message, optional, tag = "50801")]
    rust: Option<RustField>,
}

/// `ironic.rpc.v1.RustField`.
#[derive(Clone, PartialEq, Message)]
struct RustField {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "2")]
    r#type: String,
}

#[derive(Clone, PartialEq, Message)]
struct Svc {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
    #[prost(message, repeated, tag = "2")]
    method: Vec<MethodDesc>,
}

#[derive(Clone, PartialEq, Message)]
struct MethodDesc {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
    #[prost(string, optional, tag = "2")]
    input_type: Option<String>,
    #[prost(string, optional, tag = "3")]
    output_type: Option<String>,
    #[prost(message, optional, tag = "4")]
    options: Option<MethodOpts>,
}

#[derive(Clone, PartialEq, Message)]
struct MethodOpts {
    #[prost(message, optional, tag = "50801")]
    call: Option<CallSpec>,
}

/// `ironic.rpc.v1.CallSpec`.
#[derive(Clone, PartialEq, Message)]
struct CallSpec {
    #[prost(string, tag = "1")]
    owner: String,
    #[prost(bool, tag = "2")]
    retry_safe: bool,
    #[prost(string, tag = "3")]
    retry_safe_field: String,
    #[prost(string, repeated, tag = "4")]
    retry_safe_values: Vec<String>,
    #[prost(string, tag = "5")]
    lost_hint: String,
    #[prost(bool, tag = "6")]
    default_ok: bool,
    #[prost(bool, tag = "7")]
    manual: bool,
    #[prost(string, tag = "8")]
    room: String,
}

#[derive(Clone, PartialEq, Message)]
struct SourceInfo {
    #[prost(message, repeated, tag = "1")]
    location: Vec<Location>,
}

#[derive(Clone, PartialEq, Message)]
struct Location {
    #[prost(int32, repeated, tag = "1")]
    path: Vec<i32>,
    #[prost(string, optional, tag = "3")]
    leading_comments: Option<String>,
}

// `FieldDescriptorProto` enums.
const LABEL_REPEATED: i32 = 3;
const TYPE_MESSAGE: i32 = 11;

fn scalar(ty: i32) -> Option<&'static str> {
    Some(match ty {
        1 => "f64",
        2 => "f32",
        3 | 16 | 18 => "i64",
        4 | 6 => "u64",
        5 | 15 | 17 => "i32",
        7 | 13 => "u32",
        8 => "bool",
        9 => "String",
        12 => "Vec<u8>",
        _ => return None,
    })
}

// ---------------------------------------------------------------------------------------
// The calls

type Failure = Box<dyn std::error::Error>;

/// One field of a Rust request type.
struct Field {
    /// In the prost message (`r#trait` for `trait`).
    wire: String,
    /// In the Rust request type.
    name: String,
    /// The field's name in the proto, as the `(call)` option names it.
    proto: String,
    ty: String,
    doc: Option<String>,
}

fn rust_ident(name: &str) -> String {
    match name {
        "as" | "break" | "const" | "continue" | "crate" | "else" | "enum" | "extern" | "false"
        | "fn" | "for" | "if" | "impl" | "in" | "let" | "loop" | "match" | "mod" | "move"
        | "mut" | "pub" | "ref" | "return" | "static" | "struct" | "trait" | "true" | "type"
        | "unsafe" | "use" | "where" | "while" | "async" | "await" | "dyn" | "abstract"
        | "become" | "box" | "do" | "final" | "macro" | "override" | "priv" | "typeof"
        | "unsized" | "virtual" | "yield" | "try" | "gen" => {
            format!("r#{name}")
        }
        _ => name.to_string(),
    }
}

/// `update_node` → `UpdateNode`.
fn camel(method: &str) -> String {
    method
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_uppercase().chain(c).collect::<String>())
                .unwrap_or_default()
        })
        .collect()
}

/// Whether a Rust type the generator writes is `Eq` (then the request derives it).
fn is_eq(ty: &str) -> bool {
    let inner = |p: &str| ty.strip_prefix(p).and_then(|t| t.strip_suffix('>'));
    if let Some(t) = inner("Option<").or_else(|| inner("Vec<")) {
        return is_eq(t);
    }
    matches!(
        ty,
        "String" | "bool" | "u32" | "i32" | "u64" | "i64" | "Vec<u8>" | "NodeRef" | "AllocationRef"
    )
}

fn field(f: &FieldDesc, doc: Option<String>) -> Result<Field, Failure> {
    let proto = f.name.clone().unwrap_or_default();
    let opts = f.options.as_ref().and_then(|o| o.rust.clone());
    let ty = f.r#type.unwrap_or_default();
    let repeated = f.label == Some(LABEL_REPEATED);
    let optional = f.proto3_optional == Some(true);
    if f.oneof_index.is_some() && !optional {
        return Err(format!(
            "field {proto}: a oneof has no generated Rust field; mark the call manual"
        )
        .into());
    }
    let json = ty == 9 && proto.ends_with("_json");
    let base = if json {
        "serde_json::Value".to_string()
    } else if ty == TYPE_MESSAGE {
        short(f.type_name.as_deref().unwrap_or_default()).to_string()
    } else {
        scalar(ty)
            .ok_or_else(|| format!("field {proto}: no Rust type for proto type {ty}"))?
            .to_string()
    };
    let inferred = if repeated {
        format!("Vec<{base}>")
    } else if optional {
        format!("Option<{base}>")
    } else {
        base
    };
    let named = opts.as_ref().map(|o| o.name.clone()).unwrap_or_default();
    let name = if !named.is_empty() {
        named
    } else if json {
        proto.trim_end_matches("_json").to_string()
    } else {
        proto.clone()
    };
    let typed = opts.map(|o| o.r#type).unwrap_or_default();
    Ok(Field {
        wire: rust_ident(&proto),
        name: rust_ident(&name),
        proto,
        ty: if typed.is_empty() { inferred } else { typed },
        doc,
    })
}

/// `#[doc = …]` lines of a proto comment, at `indent`.
fn doc(out: &mut String, indent: &str, comment: Option<&str>) {
    for line in comment.unwrap_or_default().trim_end().lines() {
        let line = line.strip_prefix(' ').unwrap_or(line);
        let _ = writeln!(out, "{indent}#[doc = {:?}]", format!(" {line}").trim_end());
    }
}

/// The lost-call hint as a `format!`: `{field}` and `{field.member}` name the request's
/// fields by their proto names.
fn hint(template: &str, fields: &[Field], method: &str) -> Result<String, Failure> {
    let (mut text, mut args, mut rest) = (String::new(), Vec::new(), template);
    while let Some(open) = rest.find('{') {
        let close = rest[open..]
            .find('}')
            .ok_or_else(|| format!("{method}: unclosed {{ in lost_hint"))?
            + open;
        let path = &rest[open + 1..close];
        let (head, tail) = path.split_once('.').unwrap_or((path, ""));
        let f = fields
            .iter()
            .find(|f| f.proto == head)
            .ok_or_else(|| format!("{method}: lost_hint names no field {head:?}"))?;
        text.push_str(&rest[..open]);
        text.push_str("{}");
        args.push(if tail.is_empty() {
            format!("self.{}", f.name)
        } else {
            format!("self.{}.{tail}", f.name)
        });
        rest = &rest[close + 1..];
    }
    text.push_str(rest);
    Ok(if args.is_empty() {
        format!("{text:?}.into()")
    } else {
        format!("format!({text:?}, {})", args.join(", "))
    })
}

fn route(spec: &CallSpec, fields: &[Field], method: &str) -> Result<String, Failure> {
    if spec.owner.is_empty() {
        return Ok("Route::Any".into());
    }
    let f = fields
        .iter()
        .find(|f| f.proto == spec.owner)
        .ok_or_else(|| format!("{method}: owner names no field {:?}", spec.owner))?;
    let n = &f.name;
    Ok(match f.ty.as_str() {
        "NodeRef" => format!("Route::Owner(self.{n}.clone())"),
        "Option<NodeRef>" => format!(
            "match &self.{n} {{\n            Some(n) => Route::Owner(n.clone()),\n            None => Route::Any,\n        }}"
        ),
        "Node" => format!("Route::Owner(NodeRef::from(&self.{n}))"),
        other => return Err(format!("{method}: owner field of type {other}").into()),
    })
}

fn call(
    out: &mut String,
    method: &str,
    spec: &CallSpec,
    msg: &Msg,
    comments: &Comments,
    path: &[i32],
    reply: &str,
) -> Result<(), Failure> {
    let ty = camel(method);
    let wire = msg.name.clone().unwrap_or_default();
    let fields = msg
        .field
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let mut p = path.to_vec();
            p.extend([2, i as i32]);
            field(f, comments.get(&p).cloned())
        })
        .collect::<Result<Vec<_>, _>>()?;
    doc(out, "", comments.get(path).map(String::as_str));
    let eq = if fields.iter().all(|f| is_eq(&f.ty)) {
        ", Eq"
    } else {
        ""
    };
    let _ = writeln!(out, "#[derive(Debug, Clone, PartialEq{eq})]");
    if fields.is_empty() {
        let _ = writeln!(out, "pub struct {ty};\n");
    } else {
        let _ = writeln!(out, "pub struct {ty} {{");
        for f in &fields {
            doc(out, "    ", f.doc.as_deref());
            let _ = writeln!(out, "    pub {}: {},", f.name, f.ty);
        }
        let _ = writeln!(out, "}}\n");
    }
    let _ = writeln!(out, "impl Call for {ty} {{");
    let _ = writeln!(
        out,
        "    const METHOD: &'static str = m::{};",
        method.to_uppercase()
    );
    let _ = writeln!(
        out,
        "    type Reply = <pb::{reply} as WireReply>::Reply;\n    type Wire = pb::{wire};"
    );
    let _ = writeln!(
        out,
        "    fn route(&self) -> Route {{\n        {}\n    }}",
        route(spec, &fields, method)?
    );
    if !spec.retry_safe_field.is_empty() {
        let f = fields
            .iter()
            .find(|f| f.proto == spec.retry_safe_field)
            .ok_or_else(|| format!("{method}: retry_safe_field names no field"))?;
        let values: Vec<String> = spec
            .retry_safe_values
            .iter()
            .map(|v| format!("{v:?}"))
            .collect();
        let _ = writeln!(
            out,
            "    fn retry_safe(&self) -> bool {{\n        matches!(self.{}.as_str(), {})\n    }}",
            f.name,
            values.join(" | ")
        );
    } else if spec.retry_safe {
        let _ = writeln!(
            out,
            "    fn retry_safe(&self) -> bool {{\n        true\n    }}"
        );
    }
    if !spec.lost_hint.is_empty() {
        let _ = writeln!(
            out,
            "    fn lost_hint(&self) -> String {{\n        {}\n    }}",
            hint(&spec.lost_hint, &fields, method)?
        );
    }
    let _ = writeln!(out, "    fn to_wire(self) -> pb::{wire} {{");
    if fields.is_empty() {
        let _ = writeln!(out, "        pb::{wire} {{}}");
    } else {
        let _ = writeln!(out, "        pb::{wire} {{");
        for f in &fields {
            let _ = writeln!(
                out,
                "            {}: crate::convert::Field::to_wire(self.{}),",
                f.wire, f.name
            );
        }
        let _ = writeln!(out, "        }}");
    }
    let _ = writeln!(out, "    }}");
    let w = if fields.is_empty() { "_" } else { "w" };
    let _ = writeln!(
        out,
        "    fn from_wire({w}: pb::{wire}) -> Result<Self, Error> {{"
    );
    if fields.is_empty() {
        let _ = writeln!(out, "        Ok({ty})");
    } else {
        let _ = writeln!(out, "        Ok({ty} {{");
        for f in &fields {
            let _ = writeln!(
                out,
                "            {}: crate::convert::Field::from_wire(w.{}, {:?})?,",
                f.name,
                f.wire,
                f.name.trim_start_matches("r#")
            );
        }
        let _ = writeln!(out, "        }})");
    }
    let _ = writeln!(out, "    }}\n}}\n");
    Ok(())
}

/// Leading comments by descriptor path.
type Comments = HashMap<Vec<i32>, String>;

/// The generated calls (`calls.rs`) and the routing macro (`routing.rs`).
fn calls(fds: &[u8]) -> Result<(String, String), Failure> {
    let set = FileSet::decode(fds)?;
    let file = set
        .file
        .iter()
        .find(|f| f.package.as_deref() == Some(PACKAGE))
        .ok_or("no file of package ironic.rpc.v1")?;
    let comments: Comments = file
        .source_code_info
        .iter()
        .flat_map(|s| &s.location)
        .filter_map(|l| Some((l.path.clone(), l.leading_comments.clone()?)))
        .collect();
    let service = file.service.first().ok_or("no service")?;
    let mut out = String::from(
        "// Generated by crates/ironic-rpc/build.rs from proto/ironic/rpc/v1/conductor.proto.\n\n",
    );
    let mut list = String::from("contract! {\n");
    let mut manual = String::new();
    let mut routes = String::new();
    for (i, m) in service.method.iter().enumerate() {
        let method = m.name.clone().unwrap_or_default();
        let spec = m
            .options
            .as_ref()
            .and_then(|o| o.call.clone())
            .ok_or_else(|| format!("{method}: no (call) option"))?;
        let input = short(m.input_type.as_deref().unwrap_or_default());
        let reply = short(m.output_type.as_deref().unwrap_or_default());
        if input != format!("{}Request", camel(&method)) {
            return Err(format!(
                "{method}: its request message must be named {}Request",
                camel(&method)
            )
            .into());
        }
        let (index, msg) = file
            .message_type
            .iter()
            .enumerate()
            .find(|(_, msg)| msg.name.as_deref() == Some(input))
            .ok_or_else(|| format!("{method}: no message {input}"))?;
        if spec.manual {
            let _ = writeln!(
                manual,
                "    ({method:?}, {:?}, {}),",
                spec.owner, spec.retry_safe
            );
        } else {
            call(
                &mut out,
                &method,
                &spec,
                msg,
                &comments,
                &[4, index as i32],
                reply,
            )?;
        }
        // The handler's documentation: what the call does (the request message's
        // comment), then what the method's comment adds (why it may be repeated …).
        let what = comments.get(&[4, index as i32][..]).map(String::as_str);
        let how = comments.get(&[6, 0, 2, i as i32][..]).map(String::as_str);
        doc(&mut list, "    ", what);
        if what.is_some() && how.is_some() {
            let _ = writeln!(list, "    #[doc = \"\"]");
        }
        doc(&mut list, "    ", how);
        if spec.room.is_empty() {
            return Err(format!("{method}: its (call) option names no room").into());
        }
        let ty = camel(&method);
        let _ = writeln!(
            routes,
            "            async fn {method}(&self, ctx: &$crate::Context, req: $crate::calls::{ty}) -> ::std::result::Result<<$crate::calls::{ty} as $crate::contract::Call>::Reply, ::ironic_model::Error> {{\n                self.{room}.{method}(ctx, req).await\n            }}",
            room = spec.room
        );
        let default = if spec.default_ok { " { Ok(()) }" } else { "" };
        let _ = writeln!(list, "    {} => {method}{default},", camel(&method));
    }
    list.push_str("}\n");
    out.push_str(&list);
    // The options of the calls written by hand, for the test that holds them to it.
    out.push_str("\n/// `(method, owner, retry_safe)` of the calls written by hand.\n#[cfg(test)]\npub(crate) const MANUAL: &[(&str, &str, bool)] = &[\n");
    out.push_str(&manual);
    out.push_str("];\n");
    let routing = format!(
        "// Generated by crates/ironic-rpc/build.rs from proto/ironic/rpc/v1/conductor.proto.\n\n\
         /// `impl Handlers for $t`: every call of the contract routed to the part of `$t`\n\
         /// that serves it (the proto's `(call).room`, a field of `$t` with a method of the\n\
         /// call's name taking `(ctx, request)`).\n\
         #[macro_export]\n\
         macro_rules! route_calls {{\n    ($t:ty) => {{\n        impl $crate::Handlers for $t {{\n{routes}        }}\n    }};\n}}\n"
    );
    Ok((out, routing))
}

fn main() -> Result<(), Failure> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let file = root.join("ironic/rpc/v1/conductor.proto");
    println!("cargo:rerun-if-changed={}", file.display());
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    let descriptors = out.join("conductor.descriptors");
    let mut config = prost_build::Config::new();
    config
        .protoc_executable(protoc_bin_vendored::protoc_bin_path()?)
        .file_descriptor_set_path(&descriptors)
        .enable_type_names()
        .service_generator(Box::new(MethodTable));
    let mut fds = config.load_fds(&[&file], &[root, protoc_bin_vendored::include_path()?])?;
    // Only the contract: descriptor.proto is imported for the options, not used.
    fds.file.retain(|f| f.package() == PACKAGE);
    config.compile_fds(fds)?;
    let (generated, routing) = calls(&std::fs::read(&descriptors)?)?;
    std::fs::write(out.join("calls.rs"), generated)?;
    std::fs::write(out.join("routing.rs"), routing)?;
    Ok(())
}
