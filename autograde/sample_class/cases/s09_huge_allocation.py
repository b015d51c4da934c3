"""A huge allocation (nb01 compute_group_advantages asks for a 12 GiB scratch buffer): the kernel's memory
limit makes it fail cleanly with a RuntimeError. The tests of that function and of the conventions question
(whose answer calls it) fail; group_relative_advantages passes: 2 + 3 = 5 of 17."""
CASE = {
    "nb01_group_advantages": {"base": "solution", "edit": {"compute_group_advantages": [
        ("    # Fast path: contiguous groups",
         "    workspace = torch.empty(3 * 2**30, dtype=torch.float32)  # 12 GiB scratch buffer\n"
         "    # Fast path: contiguous groups"),
    ]}},
}
