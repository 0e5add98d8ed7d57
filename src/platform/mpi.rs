//! Layer: platform. May use: nothing.
