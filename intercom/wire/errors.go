package wire

import (
	"errors"
	"fmt"
)

// ErrorCode is a code of the broker's `error` frame (spec §3.1).
type ErrorCode string

// Error frame codes (spec §3.1).
const (
	CodeProtocolMismatch         ErrorCode = "PROTOCOL_MISMATCH"
	CodeInvalidRequest           ErrorCode = "INVALID_REQUEST"
	CodeSessionIDInUse           ErrorCode = "SESSION_ID_IN_USE"
	CodeTooManySessions          ErrorCode = "TOO_MANY_SESSIONS"
	CodeRateLimited              ErrorCode = "RATE_LIMITED"
	CodeAccessDenied             ErrorCode = "ACCESS_DENIED"
	CodeBossFeatureUnavailable   ErrorCode = "BOSS_FEATURE_UNAVAILABLE"
	CodeRemoteAccessIncompatible ErrorCode = "REMOTE_ACCESS_INCOMPATIBLE"
)

// FailureCode is a code of the `delivery_failed` frame (spec §3.2).
type FailureCode string

// Delivery failure codes (spec §3.2).
const (
	FailInvalidMessage             FailureCode = "INVALID_MESSAGE"
	FailControlDispatchUnavailable FailureCode = "CONTROL_DISPATCH_UNAVAILABLE"
	FailSessionNotFound            FailureCode = "SESSION_NOT_FOUND"
	FailAmbiguousTarget            FailureCode = "AMBIGUOUS_TARGET"
	FailSenderNotFound             FailureCode = "SENDER_NOT_FOUND"
	FailInvalidReplyTarget         FailureCode = "INVALID_REPLY_TARGET"
	FailMutualAsk                  FailureCode = "MUTUAL_ASK"
	FailAskAlreadyPending          FailureCode = "ASK_ALREADY_PENDING"
	FailDuplicateMessageID         FailureCode = "DUPLICATE_MESSAGE_ID"
	FailConflictingMessageID       FailureCode = "CONFLICTING_MESSAGE_ID"
	FailTooManyPendingDeliveries   FailureCode = "TOO_MANY_PENDING_DELIVERIES"
	FailTooManyPendingAsks         FailureCode = "TOO_MANY_PENDING_ASKS"
	FailRecipientDisconnected      FailureCode = "RECIPIENT_DISCONNECTED"
	FailSenderDisconnected         FailureCode = "SENDER_DISCONNECTED"
	FailDeliveryTimeout            FailureCode = "DELIVERY_TIMEOUT"
)

// AskCancelReason is the reason of an `ask_cancelled` frame (spec §3.3).
type AskCancelReason string

// Ask cancellation reasons (spec §3.3).
const (
	AskCancelled            AskCancelReason = "cancelled"
	AskExpired              AskCancelReason = "expired"
	AskDeliveryFailed       AskCancelReason = "delivery_failed"
	AskSessionDisconnected  AskCancelReason = "session_disconnected"
	AskAuthorizationRevoked AskCancelReason = "authorization_revoked"
)

// Sentinel errors of the framing layer. Each means the connection must be
// dropped without an error frame (spec §3.1, last paragraph).
var (
	// ErrFrameTooLarge: a header declared more than MaxFrameBytes.
	ErrFrameTooLarge = errors.New("intercom frame exceeds 1 MiB")
	// ErrMalformedJSON: a payload is not valid JSON.
	ErrMalformedJSON = errors.New("intercom frame is not valid JSON")
)

// OversizeError reports a frame header that declared too many bytes.
type OversizeError struct {
	Declared int64 // bytes the header declared
	Limit    int   // bytes allowed
}

func (e *OversizeError) Error() string {
	return fmt.Sprintf("intercom frame declares %d bytes, limit %d", e.Declared, e.Limit)
}

// Is makes errors.Is(err, ErrFrameTooLarge) true.
func (e *OversizeError) Is(target error) bool { return target == ErrFrameTooLarge }

// ProtocolError is a refused client frame that the broker answers with an
// `error` frame carrying Code and Message, then closes (spec §2.0, §3.1).
// Message never contains a scope id.
type ProtocolError struct {
	Code    ErrorCode
	Message string
}

func (e *ProtocolError) Error() string { return string(e.Code) + ": " + e.Message }

func invalidRequest(format string, args ...any) *ProtocolError {
	return &ProtocolError{Code: CodeInvalidRequest, Message: fmt.Sprintf(format, args...)}
}
