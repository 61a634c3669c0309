"""``explore-report``: many explores' findings merged into one list of bugs, new or pinned."""
