package wire

// Payload bounds of spec §6.7. Lengths called "chars" are JavaScript string
// lengths (UTF-16 code units), as the reference brokers measure them; sizes
// called "bytes" are UTF-8 bytes.
const (
	MaxTextBytes              = 256 << 10 // message content.text, bytes
	MaxAttachmentContentBytes = 512 << 10 // one attachment's content, bytes
	MaxAttachments            = 16
	MaxAttachmentNameChars    = 256
	MaxMessageIDChars         = 256 // message.id, replyTo, ask control ids
	MaxTargetChars            = 512 // send.to
	MaxNameChars              = 256
	MaxCwdChars               = 4096
	MaxModelChars             = 512
	MaxStatusChars            = 512
	MaxRuntimeInstanceIDChars = 256
	MaxControlTypeChars       = 128
	MaxControlDataBytes       = 16 << 10
	MaxRejectReasonChars      = 1024
)
