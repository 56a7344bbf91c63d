package broker

// pipeSecurity is the SDDL of the Windows broker pipe: a protected DACL
// (no inherited entries) with one entry granting generic-all to the user
// whose SID is given, so only that user's processes can open the pipe.
func pipeSecurity(userSID string) string { return "D:P(A;;GA;;;" + userSID + ")" }
