"""Control flow: If, Loop and Scan (host-side steps; no shaders of their own)."""
