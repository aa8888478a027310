"""Several proxies on one account through Redis (`fleet.run`), and the same in virtual time
(`fleet.virtual`)."""
