//! Boot ISOs for virtual media: the agent's kernel and ramdisk with the kernel parameters
//! that tell it where the API is and who it is, bootable by BIOS (isolinux) and UEFI
//! (GRUB on an EFI system partition image), built with Debian's `xorriso` as upstream
//! builds them with `mkisofs`.
//!
//! Nothing is copied into a staging tree: `xorriso` maps each file into the image from
//! where it lies (`-graft-points`), and only the boot loaders' configuration files are
//! written, next to the output. The ISO is written under a temporary name and renamed,
//! so a reader (the image server, a BMC) never sees half an image.
//!
//! The UEFI side needs an EFI system partition image holding `EFI/BOOT/BOOTX64.EFI`:
//! the operator's (`[deploy] esp_image`, as upstream's `[DEFAULT] esp_image`), or one
//! [`build_esp`] makes once from Debian's `grub-efi-amd64-bin`: a stand-alone GRUB whose
//! embedded configuration finds the CD by a file only this ISO has and reads the
//! per-node `grub.cfg` from it.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// The volume label of upstream's virtual-media ISOs (the agent looks for it).
pub const LABEL: &str = "VMEDIA_BOOT_ISO";

pub use ironic_model::boot_params::MAX_KERNEL_PARAMS;

/// How long one tool may run: an ISO of a large ramdisk takes seconds.
pub(crate) const TOOL_LIMIT: Duration = Duration::from_secs(300);

/// The tools and boot loader files an ISO is built from (`[deploy]`).
#[derive(Debug, Clone)]
pub struct Tools {
    pub xorriso: String,
    /// syslinux's `isolinux.bin` (Debian: `/usr/lib/ISOLINUX/isolinux.bin`).
    pub isolinux_bin: PathBuf,
    /// syslinux's `ldlinux.c32` (Debian: `/usr/lib/syslinux/modules/bios/ldlinux.c32`).
    pub ldlinux_c32: PathBuf,
    /// An EFI system partition image (FAT) booting `EFI/BOOT/BOOTX64.EFI`; none: the ISO
    /// boots by BIOS only.
    pub esp_image: Option<PathBuf>,
}

/// What goes on one boot ISO.
#[derive(Debug, Clone, Copy)]
pub struct BootIso<'a> {
    pub kernel: &'a Path,
    pub ramdisk: &'a Path,
    /// The kernel command line (checked by [`check_params`]).
    pub kernel_params: &'a str,
    /// A random id: the ISO's publisher id (upstream's `ir_pub_id`) and the name of the
    /// file GRUB finds the CD by.
    pub publisher_id: &'a str,
}

/// Why no ISO was built. Each names the missing tool or file, so that an operator knows
/// what to install or fix.
#[derive(Debug, thiserror::Error)]
pub enum IsoError {
    #[error(
        "cannot build a boot ISO: {tool} was not found ({why}); on Debian it comes with the {package} package"
    )]
    MissingTool {
        tool: String,
        package: &'static str,
        why: String,
    },
    #[error("cannot build a boot ISO: the {what} {} cannot be read", .path.display())]
    MissingFile {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot build a boot ISO: {tool} failed ({status}): {stderr}")]
    ToolFailed {
        tool: String,
        status: String,
        stderr: String,
    },
    #[error("cannot build a boot ISO: {tool} took more than {TOOL_LIMIT:?}")]
    TimedOut { tool: String },
    #[error("cannot build a boot ISO in {}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid kernel parameters: {0}")]
    Params(&'static str),
    #[error(transparent)]
    KernelParams(#[from] ironic_model::boot_params::ParamsError),
}

/// Kernel parameters that can go on a boot loader's command line: the one allow-list
/// of `ironic_model::boot_params`, for every boot loader file.
pub fn check_params(params: &str) -> Result<(), IsoError> {
    Ok(ironic_model::boot_params::check(params)?)
}

/// Builds `iso` at `out` (replacing what was there).
pub async fn build(tools: &Tools, iso: &BootIso<'_>, out: &Path) -> Result<(), IsoError> {
    check_params(iso.kernel_params)?;
    if !iso
        .publisher_id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-')
    {
        return Err(IsoError::Params(
            "the publisher id must be letters, digits and -",
        ));
    }
    for (what, path) in [
        ("kernel", iso.kernel),
        ("ramdisk", iso.ramdisk),
        ("isolinux boot loader", tools.isolinux_bin.as_path()),
        ("isolinux library", tools.ldlinux_c32.as_path()),
    ]
    .into_iter()
    .chain(
        tools
            .esp_image
            .as_deref()
            .map(|p| ("EFI system partition image", p)),
    ) {
        readable(what, path).await?;
    }
    let dir = out.parent().unwrap_or(Path::new("."));
    let io = |source| IsoError::Io {
        path: out.to_path_buf(),
        source,
    };
    tokio::fs::create_dir_all(dir).await.map_err(io)?;
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "boot.iso".into());
    let tmp = |suffix: &str| dir.join(format!(".{name}.{}.{suffix}", iso.publisher_id));
    let (isolinux_cfg, grub_cfg, marker, partial) = (
        tmp("isolinux.cfg"),
        tmp("grub.cfg"),
        tmp("marker"),
        tmp("partial"),
    );
    let result = async {
        tokio::fs::write(&isolinux_cfg, isolinux_config(iso.kernel_params))
            .await
            .map_err(io)?;
        tokio::fs::write(&grub_cfg, grub_config(iso.kernel_params))
            .await
            .map_err(io)?;
        tokio::fs::write(&marker, iso.publisher_id)
            .await
            .map_err(io)?;
        let mut args: Vec<String> = [
            "-as",
            "mkisofs",
            "-quiet",
            "-r",
            "-J",
            "-l",
            "-V",
            LABEL,
            "-publisher",
            iso.publisher_id,
            "-graft-points",
            "-b",
            "isolinux/isolinux.bin",
            "-c",
            "isolinux/boot.cat",
            "-no-emul-boot",
            "-boot-load-size",
            "4",
            "-boot-info-table",
        ]
        .map(String::from)
        .to_vec();
        if tools.esp_image.is_some() {
            args.extend(
                [
                    "-eltorito-alt-boot",
                    "-e",
                    "boot/grub/efiboot.img",
                    "-no-emul-boot",
                    "-isohybrid-gpt-basdat",
                ]
                .map(String::from),
            );
        }
        args.extend(["-o".into(), partial.display().to_string()]);
        let graft = |at: &str, from: &Path| format!("{at}={}", from.display());
        args.push(graft("/vmlinuz", iso.kernel));
        args.push(graft("/initrd", iso.ramdisk));
        args.push(graft("/isolinux/isolinux.bin", &tools.isolinux_bin));
        args.push(graft("/isolinux/ldlinux.c32", &tools.ldlinux_c32));
        args.push(graft("/isolinux/isolinux.cfg", &isolinux_cfg));
        args.push(graft("/EFI/BOOT/grub.cfg", &grub_cfg));
        args.push(graft(&format!("/ironic/{}", iso.publisher_id), &marker));
        if let Some(esp) = &tools.esp_image {
            args.push(graft("/boot/grub/efiboot.img", esp));
        }
        run(&tools.xorriso, "xorriso", &args).await?;
        tokio::fs::rename(&partial, out).await.map_err(io)
    }
    .await;
    for f in [&isolinux_cfg, &grub_cfg, &marker, &partial] {
        let _ = tokio::fs::remove_file(f).await;
    }
    result
}

/// Makes an EFI system partition image at `out` (once; kept when it exists): a FAT
/// image with a stand-alone GRUB as `EFI/BOOT/BOOTX64.EFI`, whose built-in configuration
/// finds the CD it booted from by the `/EFI/BOOT/grub.cfg` every ISO of [`build`] holds
/// and runs that file. Needs `grub-mkstandalone` (`grub-efi-amd64-bin`), `mkfs.vfat`
/// (`dosfstools`) and `mcopy` (`mtools`).
pub async fn build_esp(out: &Path) -> Result<(), IsoError> {
    if tokio::fs::metadata(out).await.is_ok() {
        return Ok(());
    }
    let io = |source| IsoError::Io {
        path: out.to_path_buf(),
        source,
    };
    let dir = out.parent().unwrap_or(Path::new("."));
    tokio::fs::create_dir_all(dir).await.map_err(io)?;
    let pid = std::process::id();
    let (cfg, efi, partial) = (
        dir.join(format!(".esp-{pid}.cfg")),
        dir.join(format!(".esp-{pid}.efi")),
        dir.join(format!(".esp-{pid}.img")),
    );
    let result = async {
        tokio::fs::write(
            &cfg,
            "search --no-floppy --file --set=root /EFI/BOOT/grub.cfg\nconfigfile ($root)/EFI/BOOT/grub.cfg\n",
        )
        .await
        .map_err(io)?;
        let s = |p: &Path| p.display().to_string();
        run(
            "grub-mkstandalone",
            "grub-efi-amd64-bin",
            &[
                "-O".into(),
                "x86_64-efi".into(),
                "--locales=".into(),
                "--fonts=".into(),
                "--themes=".into(),
                "--install-modules=linux normal configfile search search_fs_file iso9660 part_gpt part_msdos fat echo test all_video".into(),
                "--modules=search search_fs_file iso9660 configfile normal linux".into(),
                "-o".into(),
                s(&efi),
                format!("boot/grub/grub.cfg={}", s(&cfg)),
            ],
        )
        .await?;
        let efi_len = tokio::fs::metadata(&efi).await.map_err(io)?.len();
        // FAT12/16 with room for the loader and its directory entries.
        let kib = (efi_len / 1024 + 512).max(1440);
        run(
            "mkfs.vfat",
            "dosfstools",
            &[
                "-C".into(),
                "-n".into(),
                "ESP".into(),
                s(&partial),
                kib.to_string(),
            ],
        )
        .await?;
        let image = format!("-i{}", s(&partial));
        run("mmd", "mtools", &[image.clone(), "::EFI".into(), "::EFI/BOOT".into()]).await?;
        run(
            "mcopy",
            "mtools",
            &[image, s(&efi), "::EFI/BOOT/BOOTX64.EFI".into()],
        )
        .await?;
        tokio::fs::rename(&partial, out).await.map_err(io)
    }
    .await;
    for f in [&cfg, &efi, &partial] {
        let _ = tokio::fs::remove_file(f).await;
    }
    result
}

/// isolinux's configuration: boot the one entry at once, on the serial console too.
fn isolinux_config(params: &str) -> String {
    format!(
        "default boot\nprompt 0\ntimeout 0\nlabel boot\n  kernel /vmlinuz\n  append initrd=/initrd text {params} --\n"
    )
}

/// GRUB's (UEFI): the same entry.
fn grub_config(params: &str) -> String {
    format!(
        "set default=0\nset timeout=0\nmenuentry \"boot\" {{\n  linux /vmlinuz text {params} --\n  initrd /initrd\n}}\n"
    )
}

async fn readable(what: &'static str, path: &Path) -> Result<(), IsoError> {
    tokio::fs::File::open(path)
        .await
        .map(drop)
        .map_err(|source| IsoError::MissingFile {
            what,
            path: path.to_path_buf(),
            source,
        })
}

/// Runs `tool` to its end within [`TOOL_LIMIT`]; its standard error (the last 2 KiB)
/// is the failure's text. Config drives are built with it too (`configdrive`).
pub(crate) async fn run(
    tool: impl AsRef<std::ffi::OsStr>,
    package: &'static str,
    args: &[String],
) -> Result<(), IsoError> {
    let tool_os = tool.as_ref();
    let tool = tool_os.to_string_lossy();
    let child = tokio::process::Command::new(tool_os)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| IsoError::MissingTool {
            tool: tool.to_string(),
            package,
            why: e.to_string(),
        })?;
    let out = tokio::time::timeout(TOOL_LIMIT, child.wait_with_output())
        .await
        .map_err(|_| IsoError::TimedOut {
            tool: tool.to_string(),
        })?
        .map_err(|e| IsoError::ToolFailed {
            tool: tool.to_string(),
            status: "not waited for".into(),
            stderr: e.to_string(),
        })?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let start = err.len().saturating_sub(2048);
    let start = (start..err.len())
        .find(|i| err.is_char_boundary(*i))
        .unwrap_or(err.len());
    Err(IsoError::ToolFailed {
        tool: tool.to_string(),
        status: out.status.to_string(),
        stderr: err[start..].trim().to_string(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn tools(dir: &Path) -> Tools {
        Tools {
            xorriso: "xorriso".into(),
            isolinux_bin: "/usr/lib/ISOLINUX/isolinux.bin".into(),
            ldlinux_c32: "/usr/lib/syslinux/modules/bios/ldlinux.c32".into(),
            esp_image: Some(dir.join("esp.img")),
        }
    }

    /// A file read back from an ISO with `xorriso -osirrox`.
    async fn extract(iso: &Path, inside: &str, to: &Path) -> Vec<u8> {
        let st = tokio::process::Command::new("xorriso")
            .args(["-osirrox", "on", "-indev"])
            .arg(iso)
            .args(["-extract", inside])
            .arg(to)
            .stderr(Stdio::null())
            .status()
            .await
            .unwrap();
        assert!(st.success(), "extract {inside}");
        std::fs::read(to).unwrap()
    }

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("iso-test-{name}-{}", uuid_ish()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn uuid_ish() -> String {
        format!(
            "{}-{:?}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        )
    }

    /// The ISO holds the kernel, the ramdisk and the parameters in both boot loaders'
    /// files, and boots by BIOS and by UEFI (its El Torito catalogue, as xorriso reads
    /// it back).
    #[tokio::test]
    async fn an_iso_holds_kernel_ramdisk_and_parameters() {
        let d = scratch("holds");
        let (kernel, ramdisk) = (d.join("k"), d.join("r"));
        std::fs::write(&kernel, b"a kernel").unwrap();
        std::fs::write(&ramdisk, vec![7u8; 3 << 20]).unwrap();
        let t = tools(&d);
        build_esp(t.esp_image.as_deref().unwrap()).await.unwrap();
        let params = "ipa-api-url=http://10.0.2.2:6385 ipa-agent-token=abc boot_method=vmedia console=ttyS0,115200";
        let out = d.join("out/boot.iso");
        let iso = BootIso {
            kernel: &kernel,
            ramdisk: &ramdisk,
            kernel_params: params,
            publisher_id: "0b9c1c2e-pub",
        };
        build(&t, &iso, &out).await.unwrap();
        assert_eq!(extract(&out, "/vmlinuz", &d.join("x1")).await, b"a kernel");
        assert_eq!(
            extract(&out, "/initrd", &d.join("x2")).await,
            std::fs::read(&ramdisk).unwrap()
        );
        let cfg = String::from_utf8(extract(&out, "/isolinux/isolinux.cfg", &d.join("x3")).await)
            .unwrap();
        assert!(
            cfg.contains(&format!("append initrd=/initrd text {params} --")),
            "{cfg}"
        );
        let grub =
            String::from_utf8(extract(&out, "/EFI/BOOT/grub.cfg", &d.join("x4")).await).unwrap();
        assert!(
            grub.contains(&format!("linux /vmlinuz text {params} --")),
            "{grub}"
        );
        let report = tokio::process::Command::new("xorriso")
            .args(["-indev"])
            .arg(&out)
            .args(["-report_el_torito", "plain"])
            .output()
            .await
            .unwrap();
        let report = String::from_utf8_lossy(&report.stdout);
        assert!(report.contains("BIOS"), "{report}");
        assert!(report.contains("UEFI"), "{report}");
        // Nothing of the build is left beside the ISO.
        let left: Vec<_> = std::fs::read_dir(d.join("out")).unwrap().collect();
        assert_eq!(left.len(), 1);
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A failure names what is missing.
    #[tokio::test]
    async fn a_failure_names_the_missing_tool_or_file() {
        let d = scratch("missing");
        let (kernel, ramdisk) = (d.join("k"), d.join("r"));
        std::fs::write(&kernel, b"k").unwrap();
        let iso = BootIso {
            kernel: &kernel,
            ramdisk: &ramdisk,
            kernel_params: "a=b",
            publisher_id: "p",
        };
        let mut t = tools(&d);
        t.esp_image = None;
        let e = build(&t, &iso, &d.join("b.iso"))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("the ramdisk") && e.contains(&ramdisk.display().to_string()),
            "{e}"
        );
        std::fs::write(&ramdisk, b"r").unwrap();
        t.xorriso = "/nonexistent/xorriso".into();
        let e = build(&t, &iso, &d.join("b.iso"))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/nonexistent/xorriso was not found") && e.contains("xorriso package"),
            "{e}"
        );
        t = tools(&d);
        t.esp_image = None;
        t.isolinux_bin = d.join("no-isolinux.bin");
        let e = build(&t, &iso, &d.join("b.iso"))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("isolinux boot loader") && e.contains("no-isolinux.bin"),
            "{e}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn parameters_that_could_escape_the_boot_configuration_are_refused() {
        for bad in [
            "a\nb",
            "a=$x",
            "a;b",
            "x\"y",
            "a}b",
            "a|b",
            &"a".repeat(2049),
        ] {
            assert!(check_params(bad).is_err(), "{bad}");
        }
        assert!(check_params("ipa-api-url=https://[fd00::1]:6385 console=ttyS0,115200n8").is_ok());
    }
}
