"""The local stack: the gateway, its emulator and example upstream servers on one machine."""
