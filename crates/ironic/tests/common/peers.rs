#![allow(clippy::unwrap_used)]
//! Protocol peers nobody here wrote, run by the tests on loopback: sushy-tools'
//! Redfish emulator ([`Emulator`]) and pyghmi's fake IPMI BMC ([`FakeBmc`]), from the
//! virtualenv `scripts/test.sh` prepares (`IRONIC_TEST_SUSHY`, `IRONIC_TEST_PYTHON`),
//! and Debian's `ipmitool`.

use super::procs::{Proc, free_port};
use super::until;
use serde_json::{Value, json};
use std::time::Duration;

pub const SYSTEM: &str = "11111111-1111-1111-1111-111111111111";
pub const OTHER: &str = "22222222-2222-2222-2222-222222222222";

/// A running `sushy-emulator` with two fake systems.
pub struct Emulator {
    proc: Proc,
    pub port: u16,
    dir: std::path::PathBuf,
    /// The certificate it serves HTTPS with (trusted by [`Emulator::call`]).
    pub ca: Option<std::path::PathBuf>,
    user: Option<(String, String)>,
}

/// sushy-tools' `sushy-emulator`, its fake systems driver given BIOS settings to keep:
/// that driver has none (its `Bios` resource answers 501), while the libvirt one, which
/// needs a hypervisor, keeps them in the domain. Everything on the wire (the `Bios`
/// and `Bios/Settings` resources, `#Bios.ResetBios`) is the emulator's own; only the
/// storage is added, in the fake system's state, as the libvirt driver's semantics
/// (settings apply at once, a reset restores the defaults).
const EMULATOR: &str = r#"import sys
from sushy_tools.emulator import main as emulator
from sushy_tools.emulator.resources.systems import fakedriver

DEFAULT_BIOS = {"BootMode": "Uefi", "EmbeddedSata": "Raid", "NicBoot1": "NetworkBoot",
                "NumCores": "10", "ProcTurboMode": "Enabled", "QuietBoot": "true"}

class FakeWithBios(fakedriver.FakeDriver):
    def get_bios(self, identity):
        return dict(self._get(identity).get("bios") or DEFAULT_BIOS)

    def set_bios(self, identity, attributes):
        bios = self.get_bios(identity)
        bios.update(attributes)
        self._update(identity, bios=bios)

    def reset_bios(self, identity):
        self._update(identity, bios=dict(DEFAULT_BIOS))

fakedriver.FakeDriver = FakeWithBios
sys.argv[0] = "sushy-emulator"
sys.exit(emulator.main())
"#;

/// How the emulator is reached: HTTPS with a certificate, HTTP basic authentication.
#[derive(Default)]
pub struct Access {
    /// The certificate and key it serves HTTPS with.
    pub tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// The one user it accepts and the password (stored bcrypt-hashed, as it wants).
    pub user: Option<(String, String)>,
}

impl Emulator {
    pub fn start() -> Emulator {
        Self::start_with(Access::default())
    }

    pub fn start_with(access: Access) -> Emulator {
        let bin = std::env::var("IRONIC_TEST_SUSHY").expect(
            "IRONIC_TEST_SUSHY: the sushy-emulator of scripts/test.sh's virtualenv (run the tests with scripts/test.sh)",
        );
        let dir = std::env::temp_dir().join(format!("ironic-sushy-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(dir.join("state")).unwrap();
        let port = free_port();
        // The configuration is a Python file.
        let conf = format!(
            "SUSHY_EMULATOR_FAKE_DRIVER = True\n\
             SUSHY_EMULATOR_STATE_DIR = '{}'\n\
             SUSHY_EMULATOR_FAKE_SYSTEMS = [\n\
               {{'uuid': '{SYSTEM}', 'name': 'node-0', 'power_state': 'Off',\n\
                 'nics': [{{'mac': '52:54:00:aa:bb:01'}}, {{'mac': '52:54:00:aa:bb:02'}}]}},\n\
               {{'uuid': '{OTHER}', 'name': 'node-1', 'power_state': 'On', 'boot_mode': 'Legacy',\n\
                 'nics': [{{'mac': '52:54:00:cc:dd:01'}}]}},\n\
             ]\n",
            dir.join("state").display()
        );
        let mut conf = conf;
        if let Some((cert, key)) = &access.tls {
            conf.push_str(&format!(
                "SUSHY_EMULATOR_SSL_CERT = '{}'\nSUSHY_EMULATOR_SSL_KEY = '{}'\n",
                cert.display(),
                key.display()
            ));
        }
        if let Some((user, password)) = &access.user {
            // bcrypt at its lowest cost: the emulator checks every request.
            let python = std::path::Path::new(&bin).with_file_name("python");
            let out = std::process::Command::new(python)
                .args([
                    "-c",
                    "import bcrypt, sys; print(bcrypt.hashpw(sys.argv[1].encode(), bcrypt.gensalt(4)).decode())",
                    password,
                ])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let hash = String::from_utf8(out.stdout).unwrap();
            std::fs::write(dir.join("htpasswd"), format!("{user}:{}", hash.trim())).unwrap();
            conf.push_str(&format!(
                "SUSHY_EMULATOR_AUTH_FILE = '{}'\n",
                dir.join("htpasswd").display()
            ));
        }
        let conf_path = dir.join("emulator.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let proc = Self::spawn(&bin, &dir, port);
        Emulator {
            proc,
            port,
            dir,
            ca: access.tls.map(|(cert, _)| cert),
            user: access.user,
        }
    }

    /// The emulator goes away (as a BMC that loses power or its network).
    pub fn stop(&mut self) {
        self.proc.kill9();
    }

    /// And comes back, on the same port, with the same state.
    pub fn restart(&mut self) {
        let bin = std::env::var("IRONIC_TEST_SUSHY").unwrap();
        self.proc = Self::spawn(&bin, &self.dir, self.port);
    }

    /// sushy-tools' emulator through [`EMULATOR`], with the virtualenv's Python (next to
    /// the `sushy-emulator` script `bin`).
    fn spawn(bin: &str, dir: &std::path::Path, port: u16) -> Proc {
        std::fs::write(dir.join("emulator.py"), EMULATOR).unwrap();
        let python = std::path::Path::new(bin).with_file_name("python");
        Proc::spawn(
            &python.display().to_string(),
            "sushy",
            &[
                dir.join("emulator.py").display().to_string(),
                "--config".into(),
                dir.join("emulator.conf").display().to_string(),
                "-i".into(),
                "127.0.0.1".into(),
                "-p".into(),
                port.to_string(),
            ],
            &[],
            dir,
        )
    }

    /// A call on the emulator itself, through `curl` (an independent client; HTTPS
    /// trusting its certificate, with its user when it has one): (status, JSON body or
    /// null).
    pub async fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let mut c = tokio::process::Command::new("curl");
        c.args([
            "-sS",
            "--max-time",
            "20",
            "-X",
            method,
            "-w",
            "\n%{http_code}",
        ]);
        if let Some(ca) = &self.ca {
            c.arg("--cacert").arg(ca);
        }
        if let Some((u, p)) = &self.user {
            c.args(["-u", &format!("{u}:{p}")]);
        }
        if let Some(b) = body {
            c.args(["-H", "Content-Type: application/json", "-d", &b.to_string()]);
        }
        let out = c
            .arg(format!("{}{path}", self.address()))
            .output()
            .await
            .expect("curl is installed");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
        (
            status.trim().parse().unwrap_or(0),
            serde_json::from_str(body).unwrap_or(Value::Null),
        )
    }

    /// A power action on the emulator itself, behind the service's back.
    pub async fn reset(&self, id: &str, kind: &str) {
        let (status, body) = self
            .call(
                "POST",
                &format!("/redfish/v1/Systems/{id}/Actions/ComputerSystem.Reset"),
                Some(&json!({"ResetType": kind})),
            )
            .await;
        assert!(status < 300, "{status} {body}");
    }

    pub fn address(&self) -> String {
        let scheme = if self.ca.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// A resource of the emulator, which must exist.
    pub async fn get(&self, path: &str) -> Value {
        let (status, body) = self.call("GET", path, None).await;
        assert_eq!(status, 200, "{path}: {body}");
        body
    }

    pub async fn system(&self, id: &str) -> Value {
        self.get(&format!("/redfish/v1/Systems/{id}")).await
    }

    /// The system's BIOS attributes as the emulator holds them.
    pub async fn bios(&self, id: &str) -> Value {
        self.get(&format!("/redfish/v1/Systems/{id}/BIOS")).await["Attributes"].clone()
    }

    pub async fn ready(&self) {
        until(
            "sushy-emulator answers",
            Duration::from_secs(30),
            || async { std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() },
        )
        .await;
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        self.proc.kill9();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// pyghmi's `FakeBmc`, bound to 127.0.0.1 (its own entry point listens on every
/// address), on a free UDP port.
const RUNNER: &str = r#"import sys
import pyghmi.ipmi.bmc as bmc
from pyghmi.cmd.fakebmc import FakeBmc

class LoopbackBmc(FakeBmc):
    def __init__(self, port, password):
        bmc.Bmc.__init__(self, {'admin': password}, port=port, address='127.0.0.1')
        self.powerstate = 'off'
        self.bootdevice = 'default'

LoopbackBmc(int(sys.argv[1]), sys.argv[2]).listen()
"#;

pub struct FakeBmc {
    proc: Proc,
    pub port: u16,
    /// User `admin`'s password.
    pub password: String,
    dir: std::path::PathBuf,
}

pub fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .expect("a free UDP port")
}

impl FakeBmc {
    pub fn python() -> String {
        std::env::var("IRONIC_TEST_PYTHON").expect(
            "IRONIC_TEST_PYTHON: the Python of scripts/test.sh's virtualenv, with pyghmi (run the tests with scripts/test.sh)",
        )
    }

    fn spawn(dir: &std::path::Path, port: u16, password: &str) -> Proc {
        Proc::spawn(
            &Self::python(),
            "fakebmc",
            &[
                dir.join("bmc.py").display().to_string(),
                port.to_string(),
                password.to_string(),
            ],
            &[],
            dir,
        )
    }

    /// pyghmi's own credentials: `admin`, `password`.
    pub async fn start() -> FakeBmc {
        Self::start_with_password("password").await
    }

    pub async fn start_with_password(password: &str) -> FakeBmc {
        let dir = std::env::temp_dir().join(format!("ironic-fakebmc-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("bmc.py"), RUNNER).unwrap();
        let port = free_udp_port();
        let bmc = FakeBmc {
            proc: Self::spawn(&dir, port, password),
            port,
            password: password.to_string(),
            dir,
        };
        bmc.ready().await;
        bmc
    }

    pub async fn ready(&self) {
        until("the fake BMC answers", Duration::from_secs(30), || async {
            self.ipmitool(&["power", "status"]).is_some()
        })
        .await;
    }

    /// `ipmitool` run by the test itself, to see the BMC as it is.
    pub fn ipmitool(&self, args: &[&str]) -> Option<String> {
        let out = std::process::Command::new("ipmitool")
            .args([
                "-I",
                "lanplus",
                "-H",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
            ])
            .args(["-U", "admin", "-P", &self.password, "-R", "1", "-N", "1"])
            .args(args)
            .output()
            .expect("ipmitool is installed (scripts/test.sh installs it)");
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    pub fn power(&self) -> String {
        self.ipmitool(&["power", "status"])
            .unwrap()
            .trim()
            .to_string()
    }

    pub fn boot_flags(&self) -> String {
        self.ipmitool(&["chassis", "bootparam", "get", "5"])
            .unwrap()
    }

    pub fn stop(&mut self) {
        self.proc.kill9();
    }

    pub async fn restart(&mut self) {
        self.proc = Self::spawn(&self.dir, self.port, &self.password);
        self.ready().await;
    }
}

impl Drop for FakeBmc {
    fn drop(&mut self) {
        self.proc.kill9();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
