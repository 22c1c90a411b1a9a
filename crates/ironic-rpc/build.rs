//! Generates the protobuf types of `proto/ironic/rpc/v1` with a vendored `protoc` (no
//! system protoc needed), and from the `Conductor` service the method table
//! (`service::conductor`): one constant per method, and every method with its request
//! and reply message. The Rust calls name their method through these constants, so a
//! call the proto does not declare does not compile.

use std::fmt::Write;

use prost_build::{Service, ServiceGenerator};

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

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let file = root.join("ironic/rpc/v1/conductor.proto");
    println!("cargo:rerun-if-changed={}", file.display());
    prost_build::Config::new()
        .protoc_executable(protoc_bin_vendored::protoc_bin_path()?)
        .enable_type_names()
        .service_generator(Box::new(MethodTable))
        .compile_protos(&[file], &[root])?;
    Ok(())
}
