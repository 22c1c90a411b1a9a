//! The one check of kernel parameters, for every boot loader file they reach (the
//! virtual-media ISO's isolinux and GRUB configurations, the iPXE script, the PXELINUX
//! configuration, and whatever boot interface comes next): an allow-list, so that no
//! loader's syntax (a line break, iPXE's `||` and `&&`, GRUB's `;`, `{`, `$`, quotes)
//! can turn a node's `kernel_append_params` into boot loader commands. Checked when a
//! node's field is set (a 400), when the node is validated, and when the file is
//! written.

/// The longest command line (the kernel's limit on x86).
pub const MAX_KERNEL_PARAMS: usize = 2048;

/// Characters a parameter may hold besides ASCII letters and digits (`[` and `]` for
/// IPv6 addresses in URLs).
const ALLOWED: &str = "._,:=/+@%~-[]";

/// Why kernel parameters are refused (the message says what is allowed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamsError {
    #[error("kernel parameters are at most {MAX_KERNEL_PARAMS} bytes, not {0}")]
    TooLong(usize),
    #[error(
        "kernel parameters hold letters, digits and {ALLOWED} only, separated by single spaces: {0:?} is not allowed"
    )]
    Character(char),
    #[error(
        "kernel parameters are separated by single spaces (no leading, trailing or doubled space)"
    )]
    Spacing,
}

/// Checks `params`: tokens of letters, digits and [`ALLOWED`], separated by single
/// spaces, at most [`MAX_KERNEL_PARAMS`] bytes. The empty string passes.
pub fn check(params: &str) -> Result<(), ParamsError> {
    if params.len() > MAX_KERNEL_PARAMS {
        return Err(ParamsError::TooLong(params.len()));
    }
    if let Some(c) = params
        .chars()
        .find(|&c| !(c.is_ascii_alphanumeric() || c == ' ' || ALLOWED.contains(c)))
    {
        return Err(ParamsError::Character(c));
    }
    if !params.is_empty() && params.split(' ').any(str::is_empty) {
        return Err(ParamsError::Spacing);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_loader_syntax_is_refused() {
        for ok in [
            "",
            "nofb vga=normal",
            "console=tty0 console=ttyS0,115200n8 ipa-debug=1",
            "ipa-api-url=https://[fd00::1]:6385 ipa-agent-token=0a1b2c boot_method=vmedia",
            "rd.break=pre-mount systemd.unit=rescue.target %default% ip=::::host:eth0:dhcp",
        ] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            (
                "nofb\nchain http://a/x.ipxe\n#",
                ParamsError::Character('\n'),
            ),
            ("nofb || chain http://a/x.ipxe", ParamsError::Character('|')),
            ("nofb && chain http://a/x.ipxe", ParamsError::Character('&')),
            ("a ; b", ParamsError::Character(';')),
            ("a } menuentry x {", ParamsError::Character('}')),
            ("x=${net0/mac}", ParamsError::Character('$')),
            ("x=\"y\"", ParamsError::Character('"')),
            ("a\tb", ParamsError::Character('\t')),
            ("a\rb", ParamsError::Character('\r')),
            ("a # b", ParamsError::Character('#')),
            ("a <b", ParamsError::Character('<')),
            ("a `b`", ParamsError::Character('`')),
            ("a\\b", ParamsError::Character('\\')),
            ("é", ParamsError::Character('é')),
            ("a  b", ParamsError::Spacing),
            (" a", ParamsError::Spacing),
            ("a ", ParamsError::Spacing),
        ] {
            assert_eq!(check(bad), Err(why), "{bad:?}");
        }
        let long = "a".repeat(MAX_KERNEL_PARAMS + 1);
        assert_eq!(
            check(&long),
            Err(ParamsError::TooLong(MAX_KERNEL_PARAMS + 1))
        );
        assert_eq!(check(&long[1..]), Ok(()));
    }
}
