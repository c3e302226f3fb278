"""Archives read member by member and written safely (#24, #31; moved out of
kserve/ for #43): KServe's archives and an OCI artifact's tar layers are
unpacked by the same rules, so the staging of both imports them here."""
