"""Parts that several page scripts share (sign-in, selection, the write guard, build-form
state, flag widgets, the topology editor).  Page scripts themselves live one level up."""
