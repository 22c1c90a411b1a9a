//! HPE OneView (`docs/oneview.md`). Today: the REST client the `oneview` hardware type
//! will use ([`client`]), tested against `oneview-simulator`. The hardware type itself
//! (power, management, deploy with dynamic allocation, periodic checks) comes next.

pub mod client;
