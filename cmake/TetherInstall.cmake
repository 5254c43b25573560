# install + export: filled in with the host library.
